"""The command's pure computations: lag rows, reset plans, argument parsing (no servers)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aio_cluster import ConfigurationError, CoordinationError, Strategy
from aio_cluster.operator.plans import (
    LagRow,
    PlanRow,
    ResetTarget,
    ShiftBy,
    ToEarliest,
    ToLatest,
    ToOffset,
    ToTime,
    Unreadable,
    lag_rows,
    may_read,
    member_host,
    member_json,
    parse_partitions,
    parse_timestamp,
    plan_reset,
    readers,
    reset_topics,
    select_partitions,
    subscription_text,
)
from aio_cluster.zookeeper.layout import Registration, decode_registration

BOUNDS = {0: (0, 100), 1: (10, 50), 2: (0, 0)}


def test_lag_is_log_end_minus_committed_or_minus_earliest_where_nothing_is_committed() -> None:
    rows = lag_rows("t", {0: "m1"}, {0: 40, 1: Unreadable(b"x")}, BOUNDS)
    assert rows == [
        LagRow("t", 0, "m1", 40, 100, 60),
        LagRow("t", 1, None, None, 50, 40),
        LagRow("t", 2, None, None, 0, 0),
    ]
    assert list(rows[0].as_json()) == [
        "topic",
        "partition",
        "owner",
        "committed",
        "end",
        "lag",
        "paused",
        "stopped",
        "skip",
        "stuck",
        "unreadable",
    ]


def test_member_host_reads_this_librarys_ids_only() -> None:
    assert member_host("g-1", "g-1-web-3.example-4242-1764000000-7") == "web-3.example"
    assert member_host("g-1", "g-1_web-1764000000-abc") is None
    assert member_host("g-1", "other-web-1-2-3") is None


@pytest.mark.parametrize(
    ("target", "news"),
    [
        (ToEarliest(), [0, 10, 0]),
        (ToLatest(), [100, 50, 0]),
        (ToOffset(30), [30, 30, 0]),
        (ToOffset(500), [100, 50, 0]),
        (ShiftBy(-5), [35, 10, 0]),
        (ShiftBy(20), [60, 30, 0]),
    ],
)
def test_plans_stay_within_the_retained_range(target: ResetTarget, news: list[int]) -> None:
    stored = {0: 40, 2: 0}
    plan = plan_reset(target, stored, BOUNDS)
    assert plan == [PlanRow(p, stored.get(p), new) for p, new in zip([0, 1, 2], news, strict=True)]


def test_a_time_after_every_record_resets_to_the_log_end() -> None:
    plan = plan_reset(ToTime(5), {}, BOUNDS, {0: 7, 1: None, 2: None})
    assert [row.new for row in plan] == [7, 50, 0]
    with pytest.raises(ConfigurationError, match="partition 0"):
        plan_reset(ToTime(5), {}, BOUNDS)


def test_an_unreadable_offset_is_repaired_by_an_absolute_target_but_not_shifted() -> None:
    broken = {0: Unreadable(b"garbage")}
    assert plan_reset(ToOffset(3), broken, {0: (0, 9)}) == [PlanRow(0, Unreadable(b"garbage"), 3)]
    with pytest.raises(ConfigurationError, match=r"garbage.*cannot be shifted"):
        plan_reset(ShiftBy(1), broken, {0: (0, 9)})


@given(
    st.dictionaries(
        st.integers(0, 20),
        st.tuples(st.integers(0, 1000), st.integers(0, 1000)).map(sorted).map(tuple),
    ),
    st.integers(-2000, 2000),
    st.integers(0, 2000),
)
def test_every_plan_lands_within_bounds(
    bounds: dict[int, tuple[int, int]], delta: int, offset: int
) -> None:
    stored = {p: first for p, (first, _end) in bounds.items() if p % 2}
    for target in (ToEarliest(), ToLatest(), ToOffset(offset), ShiftBy(delta)):
        plan = plan_reset(target, stored, bounds)
        assert [row.partition for row in plan] == sorted(bounds)
        assert all(bounds[row.partition][0] <= row.new <= bounds[row.partition][1] for row in plan)


def test_partitions_are_parsed_and_checked_against_the_topic() -> None:
    assert parse_partitions("3, 0") == [3, 0]
    for bad in ("", "a", "1,,2", "-1"):
        with pytest.raises(ConfigurationError, match="--partitions"):
            parse_partitions(bad)
    assert select_partitions([0, 1, 2, 3], [3, 0, 3]) == [0, 3]
    assert select_partitions([1, 0], None) == [0, 1]
    with pytest.raises(ConfigurationError, match=r"\[4, 7\] do not exist"):
        select_partitions([0, 1], [7, 4, 1])


def test_times_are_iso_8601_and_utc_without_a_zone() -> None:
    assert parse_timestamp("1970-01-01T00:00:01Z") == 1000
    assert parse_timestamp("1970-01-01T00:00:01") == 1000
    assert parse_timestamp("1970-01-01T01:00:01+01:00") == 1000
    with pytest.raises(ConfigurationError, match="yesterday"):
        parse_timestamp("yesterday")


def test_registrations_of_topics_patterns_and_names_are_read() -> None:
    many = decode_registration(
        b'{"version":1,"subscription":{"orders":1,"refunds":1},"pattern":"static",'
        b'"timestamp":"1764720000000","assignment":"sticky","name":"orders-3"}'
    )
    assert many == Registration(
        ("orders", "refunds"), "static", Strategy.STICKY, 1764720000000, "orders-3"
    )
    assert many.topics == {"orders", "refunds"}
    assert many.subscribes("refunds")
    assert not many.subscribes("chargebacks")
    assert subscription_text(many) == "orders, refunds"
    assert member_json("m", "h", many, 2) == {
        "member": "m",
        "name": "orders-3",
        "host": "h",
        "rack": None,
        "since": "2025-12-03T00:00:00+00:00",
        "strategy": "sticky",
        "pattern": "static",
        "subscription": ["orders", "refunds"],
        "partitions": 2,
    }
    assert member_json("m", None, None, 0)["subscription"] == []

    white = decode_registration(
        b'{"version":1,"subscription":{"events\\\\..*":1},"pattern":"white_list",'
        b'"timestamp":"x","name":"x"}'
    )
    assert white == Registration(("events\\..*",), "white_list", Strategy.RANGE, None, "x")
    assert white.topics == frozenset()  # a pattern names no topic
    assert white.subscribes("events.a")
    assert not white.subscribes("events")
    assert not white.subscribes("my.events.a")  # the whole name matches, as in Java
    assert subscription_text(white) == "white_list events\\..*"

    black = Registration(("events\\..*|audit",), "black_list")
    assert black.subscribes("orders")
    assert not black.subscribes("audit")
    assert not black.subscribes("events.a")

    odd = decode_registration(b'{"subscription":{"a":1},"pattern":7,"name":["n"]}')
    assert (odd.pattern, odd.name) == ("7", None)
    for bad in (b"not json", b'{"subscription":["a"]}', b'{"pattern":"static"}', b"[]"):
        with pytest.raises(CoordinationError):
            decode_registration(bad)


def test_a_reset_counts_a_member_it_cannot_rule_out() -> None:
    """The member reads a subscription it does not understand as the names recorded; a reset
    takes such a member (and one whose registration is unreadable) as reading any topic."""
    assert may_read(None, "orders")
    assert not may_read(Registration(("refunds",)), "orders")
    assert may_read(Registration(("events\\..*",), "white_list"), "events.a")
    assert not may_read(Registration(("events\\..*",), "white_list"), "orders")
    for unread in (
        Registration(("(",), "white_list"),  # an expression Python refuses
        Registration(("a.*", "b.*"), "black_list"),  # more than one expression
        Registration(("x",), "regex_v2"),  # a kind of pattern unknown here
    ):
        assert not unread.understood
        assert may_read(unread, "orders")
    assert not Registration(("(",), "white_list").subscribes("(")  # the member reads nothing
    assert Registration(("x",), "regex_v2").subscribes("x")  # the member reads the names
    members = {"m2": Registration(("orders",)), "m1": None, "m3": Registration(("refunds",))}
    assert readers(members, "orders") == ["m1", "m2"]


def test_a_reset_takes_the_topics_named_every_one_or_the_only_one() -> None:
    held = ["a", "b", "c"]
    assert reset_topics("g", ["b", "a", "b"], False, held) == ["b", "a"]
    assert reset_topics("g", None, True, held) == held
    assert reset_topics("g", None, False, ["a"]) == ["a"]
    assert reset_topics("g", ["z"], False, []) == ["z"]
    with pytest.raises(ConfigurationError, match=r"3 topics \(a, b, c\).*--all-topics"):
        reset_topics("g", None, False, held)
    with pytest.raises(ConfigurationError, match=r"no offsets or claims.*--topic"):
        reset_topics("g", None, False, [])
    with pytest.raises(ConfigurationError, match="nothing to reset"):
        reset_topics("g", None, True, [])
    with pytest.raises(ConfigurationError, match="exclude each other"):
        reset_topics("g", ["a"], True, held)
