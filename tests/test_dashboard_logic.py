"""The dashboard's pure parts, without servers: what a group's history keeps and judges, how the
tables are filtered and paginated at 10,000 partitions, the charts, the reset form's targets,
and the command's arguments."""

from __future__ import annotations

import pytest

from aio_cluster.cli.arguments import parse, resolve
from aio_cluster.cli.options import DashboardOptions
from aio_cluster.dashboard.charts import lag_chart, timeline
from aio_cluster.dashboard.history import GroupHistory, Span
from aio_cluster.dashboard.pages import group_fragments, status
from aio_cluster.dashboard.resets import reset_target
from aio_cluster.dashboard.views import NO_OWNER, Filters, aggregate, member_rows, partition_page
from aio_cluster.errors import ConfigurationError
from aio_cluster.operator.environment import TOKEN_VAR
from aio_cluster.operator.health import Severity, Status
from aio_cluster.operator.plans import LagRow, ShiftBy, ToEarliest, ToOffset, ToTime
from aio_cluster.zookeeper.layout import Registration


def rows(owners: dict[int, str | None], lag: int, topic: str = "t") -> list[LagRow]:
    return [LagRow(topic, p, owner, 100 - lag, 100, lag) for p, owner in owners.items()]


def registration() -> Registration:
    return Registration(("t",), since_ms=1_700_000_000_000)


def test_history_sums_lag_per_topic_and_member_and_notes_owner_changes() -> None:
    history = GroupHistory("g", keep=60.0, window=10.0)
    members = {"a": registration(), "b": registration()}
    history.record(0.0, members, rows({0: "a", 1: "a", 2: "b"}, lag=5))
    history.record(1.0, members, rows({0: "a", 1: "b", 2: "b"}, lag=0))
    assert history.points[0].by_topic == {"t": 15}
    assert history.points[0].by_member == {"a": 10, "b": 5}
    assert history.points[1].by_member == {"a": 0, "b": 0}
    (change,) = history.changes
    assert (change.topic, change.partition, change.before, change.after) == ("t", 1, "a", "b")
    assert history.spans([("t", 1)])[("t", 1)] == [Span("a", 0.0, 1.0), Span("b", 1.0, None)]
    assert history.claimed() == {"a": 1, "b": 2}
    assert history.verdict is Severity.OK


def verdict_of(history: GroupHistory) -> Severity | None:
    """The history's verdict (a call, so that mypy does not keep an earlier look's)."""
    return history.verdict


def test_history_judges_with_checks_rules_over_its_window_and_forgets_older_looks() -> None:
    history = GroupHistory("g", keep=5.0, window=2.0)
    assert verdict_of(history) is None, "a single look is no verdict"
    for at in range(4):
        history.record(float(at), {}, rows({0: None}, lag=7))
    (finding,) = history.findings
    assert finding.status is Status.UNOWNED
    assert Status.STALLED in finding.reasons
    assert history.verdict is Severity.ERROR
    history.record(10.0, {}, rows({0: None}, lag=7))
    assert [p.at for p in history.points] == [10.0], "points older than keep are dropped"
    assert history.findings == [], "one look left in the window: no verdict for it"


def test_a_partition_that_goes_away_is_forgotten() -> None:
    history = GroupHistory("g", keep=60.0, window=10.0)
    history.record(0.0, {}, rows({0: "a", 1: "a"}, lag=1))
    history.record(1.0, {}, rows({0: "a"}, lag=1))
    assert history.spans([("t", 1)]) == {("t", 1): []}
    assert [f.partition for f in history.findings] == [0]


def big_history() -> GroupHistory:
    """10,000 partitions of two topics over 100 members, looked at twice."""
    history = GroupHistory("g", keep=60.0, window=10.0)
    members = {f"m{n:03}": registration() for n in range(100)}
    looked = [
        LagRow(f"t{p % 2}", p // 2, f"m{p % 100:03}" if p % 1000 else None, 0, p, p)
        for p in range(10_000)
    ]
    history.record(0.0, members, looked)
    history.record(1.0, members, looked)
    return history


def test_ten_thousand_partitions_are_aggregated_filtered_and_paginated() -> None:
    history = big_history()
    first = partition_page(history, Filters())
    assert len(first.rows) == 25
    assert first.matching == 10_000
    assert first.pages == 400
    assert first.rows[0].row.lag == 9_999, "the most lagging first"
    last = partition_page(history, Filters(page=999, size=500))
    assert (last.page, len(last.rows)) == (20, 500), "past the end: the last page"
    unowned = partition_page(history, Filters(owner=NO_OWNER))
    assert unowned.matching == 10
    assert {r.status for r in unowned.rows} == {Status.UNOWNED}
    one = partition_page(history, Filters(topic="t1", owner="m001"))
    assert one.matching == 100
    by_topic = aggregate(history, "topic")
    assert [(a.name, a.partitions) for a in by_topic] == [("t1", 5_000), ("t0", 5_000)]
    assert len(aggregate(history, "owner")) == 101
    fragments = group_fragments(history, Filters(), "5m", 2.0, "", writes=True)
    assert fragments["partitions"].count("<tr data-partition=") == 25
    assert fragments["timeline"].count("<rect") <= 25 + 100, "a lane per row of the page"
    assert len("".join(fragments.values())) < 200_000, "a page of 10,000 partitions stays small"


def test_the_members_table_shows_the_host_each_member_registered() -> None:
    """A named member's id is its name: its host comes from its registration; an older
    registration without one falls back to the host in a generated id."""
    members = {
        "web": Registration(("t",), name="web", host="web-1.example", since_ms=1),
        "g-box-42-1700000000-1": Registration(("t",), since_ms=2),
        "classic_consumer": None,
    }
    hosts = {row["member"]: row["host"] for row in member_rows("g", members, {})}
    assert hosts == {
        "web": "web-1.example",
        "g-box-42-1700000000-1": "box",
        "classic_consumer": None,
    }


def test_filters_parse_what_makes_sense_and_round_trip() -> None:
    parsed = Filters.parse({"topic": "t", "status": "bogus", "page": "x", "size": "7"})
    assert parsed == Filters(topic="t")
    assert Filters.parse({"owner": "m", "page": "3", "size": "100"}).query(page=4) == {
        "owner": "m",
        "page": "4",
        "size": "100",
    }


def test_charts_are_svg_with_escaped_names() -> None:
    chart = lag_chart({"<t>": [(0.0, 3), (1.0, 0)]}, 0.0, 1.0, title="lag")
    assert chart.startswith("<svg")
    assert chart.endswith("</svg>")
    assert "&lt;t&gt;: 0" in chart
    assert "<polyline" in chart
    lanes = timeline(
        {"0": [Span("a", 0.0, 1.0), Span(None, 1.0, None)]}, ["a"], 0.0, 2.0, title="x"
    )
    assert lanes.count("<rect") == 3, "two spans and one legend entry"


def test_the_banner_says_which_server_is_down() -> None:
    from aio_cluster.dashboard.history import Reachability  # noqa: PLC0415

    zookeeper, kafka = Reachability("ZooKeeper"), Reachability("Kafka")
    zookeeper.failed(5.0, "no ZooKeeper server answered")
    kafka.answered(5.0)
    text = status([zookeeper, kafka], 6.0, running=True)
    assert "ZooKeeper cannot be reached" in text
    assert "Kafka cannot" not in text
    zookeeper.answered(7.0)
    assert "ZooKeeper and Kafka answered" in status([zookeeper, kafka], 7.0, running=True)
    assert "not running" in status([zookeeper, kafka], 7.0, running=False)


@pytest.mark.parametrize(
    ("kind", "value", "target"),
    [
        ("earliest", "", ToEarliest()),
        ("offset", " 42 ", ToOffset(42)),
        ("shift", "-3", ShiftBy(-3)),
        ("datetime", "1970-01-01T00:00:01Z", ToTime(1000)),
    ],
)
def test_reset_targets_of_the_form(kind: str, value: str, target: object) -> None:
    assert reset_target(kind, value) == target


@pytest.mark.parametrize(("kind", "value"), [("offset", "-1"), ("offset", "x"), ("nope", "")])
def test_reset_targets_refused(kind: str, value: str) -> None:
    with pytest.raises(ConfigurationError):
        reset_target(kind, value)


def test_the_command_reads_the_token_from_the_environment_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    argv = ["dashboard", "--zookeeper", "z:2181", "--bootstrap", "k:9092", "--group", "g"]
    options = resolve(parse(argv)).options
    assert isinstance(options, DashboardOptions)
    assert (options.host, options.port, options.groups, options.token) == (
        "127.0.0.1",
        8080,
        ("g",),
        None,
    )
    monkeypatch.delenv(TOKEN_VAR, raising=False)
    with pytest.raises(ConfigurationError, match=TOKEN_VAR):
        resolve(parse([*argv, "--allow-writes"]))
    monkeypatch.setenv(TOKEN_VAR, "s3cret-token")
    allowed = resolve(parse([*argv, "--allow-writes"])).options
    assert isinstance(allowed, DashboardOptions)
    assert allowed.token == "s3cret-token"
    assert "s3cret-token" not in repr(allowed)
