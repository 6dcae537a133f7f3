"""Liveness by progress, the pure parts: a partition's progress, the marks, the bars they make
and the assignments that obey them (no servers)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from aio_cluster.assign.marks import Mark, barred, settles_at
from aio_cluster.assign.strategies import Strategy, assign, sticky
from aio_cluster.assign.target import next_target
from aio_cluster.errors import CoordinationError
from aio_cluster.kafka.progress import ReadProgress
from aio_cluster.operator.health import Severity, Status, Thresholds, judge
from aio_cluster.operator.plans import lag_rows
from aio_cluster.zookeeper.layout import decode_mark, decode_target, encode_mark, encode_target

members_st = st.lists(
    st.text(alphabet="abcdefgh", min_size=1, max_size=4), min_size=2, max_size=8, unique=True
)


def cut(topic: str, partitions: list[int], broker: int | None = 1, *, reads: bool = False) -> Mark:
    return Mark({topic: dict.fromkeys(partitions, broker)}, since=0, error="timeout", reads=reads)


# -- progress --------------------------------------------------------------------------------


def test_a_partition_without_progress_past_the_timeout_is_unreadable() -> None:
    progress: ReadProgress[int] = ReadProgress(timeout=5.0, gap=2.0)
    for now in range(0, 8):
        progress.asked([0, 1], float(now))
        progress.progressed(1, float(now))  # an empty answer to a long poll: progress
    progress.failed("KafkaConnectionError: cut", 7.0)
    found = progress.unreadable(7.0, lambda key: 3)
    assert list(found) == [0]
    assert found[0].since == 0.0
    assert found[0].broker == 3
    assert found[0].error == "KafkaConnectionError: cut"


def test_a_partition_not_asked_for_is_not_measured() -> None:
    """Held by a budget, paused, or its batches busy: its clock starts again once asked."""
    progress: ReadProgress[int] = ReadProgress(timeout=5.0, gap=2.0)
    progress.asked([0], 0.0)
    assert progress.unreadable(1.0, lambda key: None) == {}
    # Not asked for 20 s (the handlers were busy), then asked again: not unreadable.
    assert progress.unreadable(20.0, lambda key: None) == {}
    progress.asked([0], 20.0)
    assert progress.unreadable(21.0, lambda key: None) == {}
    for now in range(21, 27):
        progress.asked([0], float(now))
    assert list(progress.unreadable(26.0, lambda key: None)) == [0]
    progress.forget([0])
    assert progress.unreadable(26.0, lambda key: None) == {}


def test_an_error_older_than_the_last_progress_is_not_named() -> None:
    progress: ReadProgress[int] = ReadProgress(timeout=1.0, gap=5.0)
    progress.failed("old", 0.0)
    progress.asked([0], 1.0)
    progress.asked([0], 3.0)
    assert "no answer" in progress.unreadable(3.0, lambda key: None)[0].error


# -- marks and bars --------------------------------------------------------------------------


def test_a_mark_survives_its_encoding_and_strangers_bad_writes_are_refused() -> None:
    mark = Mark(
        {"t": {0: 1, 3: None}, "u": {2: 2}}, since=1234, error="e", reads=True, at=5, settle=6
    )
    assert decode_mark(encode_mark(mark)) == mark
    assert mark.brokers == frozenset({1, 2})
    for bad in (
        b"",
        b"{",
        b"[]",
        b'{"since":1}',
        b'{"since":true,"error":"","reads":true,"partitions":{}}',
        b'{"since":1,"error":"","reads":1,"partitions":{}}',
        b'{"since":1,"error":"","reads":true,"partitions":{"t":{"x":1}}}',
        b'{"since":1,"error":"","reads":true,"partitions":{"/":{"1":1}}}',
    ):
        try:
            decode_mark(bad)
        except CoordinationError:
            continue
        raise AssertionError(bad)


def test_a_member_cut_off_is_barred_while_another_can_read() -> None:
    marks = {"a": cut("t", [0, 1])}
    assert barred("t", marks, ["a", "b"], 0) == {"a": {0, 1}}
    assert barred("u", marks, ["a", "b"], 0) == {}
    assert barred("t", marks, ["a"], 0) == {}, "nobody else: nothing moves"


def test_a_mark_bars_only_once_settled() -> None:
    """Kafka down for all: the marks come a moment apart; the first must not move anything
    before the others could come."""
    early = Mark({"t": {0: 1}}, since=0, error="e", at=1_000, settle=2_500)
    assert barred("t", {"a": early}, ["a", "b"], 3_000) == {}
    assert settles_at({"a": early}, 3_000) == 3_500
    assert barred("t", {"a": early}, ["a", "b"], 3_500) == {"a": {0}}
    assert settles_at({"a": early}, 3_500) is None


def test_nothing_moves_when_nobody_can_read() -> None:
    """Kafka down for every member: each marked what it owns, and none counts as able."""
    marks = {"a": cut("t", [0, 1]), "b": cut("t", [2, 3])}
    assert barred("t", marks, ["a", "b"], 0) == {}


def test_a_partial_cut_bars_only_the_partitions_of_the_brokers_it_cannot_reach() -> None:
    # a cannot reach broker 1; b cannot reach broker 2; both still read the rest.
    marks = {"a": cut("t", [0], broker=1, reads=True), "b": cut("t", [1], broker=2, reads=True)}
    assert barred("t", marks, ["a", "b"], 0) == {"a": {0}, "b": {1}}
    # c cannot reach broker 1 either: a's partition goes to nobody it cannot reach.
    marks["c"] = cut("t", [2], broker=1, reads=True)
    assert barred("t", marks, ["a", "c"], 0) == {}


# -- assignments -----------------------------------------------------------------------------


@given(
    pnum=st.integers(0, 60),
    members=members_st,
    data=st.data(),
)
def test_sticky_obeys_the_bars_and_balances_the_others(
    pnum: int, members: list[str], data: st.DataObject
) -> None:
    partitions = list(range(pnum))
    previous = sticky(partitions, members, {})
    owners = {p: m for m, ps in previous.items() for p in ps}
    victim = data.draw(st.sampled_from(members))
    cut_off = data.draw(st.sets(st.sampled_from(partitions))) if partitions else set()
    result = sticky(partitions, members, owners, barred={victim: cut_off})
    given_out = sorted(p for ps in result.values() for p in ps)
    assert given_out == partitions, "a partition went to nobody or to two members"
    assert not set(result[victim]) & cut_off
    others = [len(result[m]) for m in members if m != victim]
    assert max(others) - min(others) <= 1
    # Sticky: a member other than the victim gives up nothing it held.
    for member in members:
        if member != victim:
            assert set(previous[member]) <= set(result[member])


@given(pnum=st.integers(0, 40), members=members_st, seed=st.integers(0, 1000))
def test_a_victim_cut_off_from_everything_keeps_nothing_and_moves_nothing_else(
    pnum: int, members: list[str], seed: int
) -> None:
    partitions = list(range(pnum))
    previous = sticky(partitions, members, {})
    owners = {p: m for m, ps in previous.items() for p in ps}
    victim = members[seed % len(members)]
    result = sticky(partitions, members, owners, barred={victim: set(previous[victim])})
    assert not set(result[victim]) & set(previous[victim])
    for member in members:
        if member != victim:
            assert set(previous[member]) <= set(result[member]), "only the victim's moved"


def test_range_and_roundrobin_move_only_the_barred() -> None:
    for strategy in (Strategy.RANGE, Strategy.ROUND_ROBIN):
        plain = assign(strategy, range(8), ["a", "b", "c"])
        result = assign(strategy, range(8), ["a", "b", "c"], {"a": set(plain["a"])})
        assert result["a"] == []
        assert sorted(p for ps in result.values() for p in ps) == list(range(8))
        for member in ("b", "c"):
            assert set(plain[member]) <= set(result[member])


def test_the_target_leaves_the_cut_off_member_out_and_gives_its_share_back() -> None:
    first = next_target(None, range(4), ["a", "b"], topic="t")
    assert first is not None
    marked = {"a": cut("t", first.partitions_of("a"))}
    second = next_target(first, range(4), ["a", "b"], marks=marked, topic="t")
    assert second is not None
    assert second.partitions_of("a") == []
    assert second.barred == {"a": tuple(first.partitions_of("a"))}
    assert decode_target(encode_target(second)) == second
    # The same marks again: the target fits, nothing is published.
    assert next_target(second, range(4), ["a", "b"], marks=marked, topic="t") is None
    # The mark cleared: a gets its share back.
    third = next_target(second, range(4), ["a", "b"], marks={}, topic="t")
    assert third is not None
    assert len(third.partitions_of("a")) == 2
    # Every member marked: nothing is barred, nothing moves.
    both = {"a": cut("t", [0, 1]), "b": cut("t", [2, 3])}
    assert next_target(first, range(4), ["a", "b"], marks=both, topic="t") is None


# -- describe and check ----------------------------------------------------------------------


def test_check_says_unreadable_naming_the_member_broker_and_error() -> None:
    mark = Mark({"t": {1: 2}}, since=1_785_585_600_000, error="RequestTimedOutError")
    rows = lag_rows(
        "t",
        {0: "m0", 1: "m1"},
        {0: 5, 1: 5},
        {0: (0, 5), 1: (0, 9)},
        None,
        {"m1": mark, "m0": Mark({"u": {0: 1}}, since=0, error="e")},
    )
    assert [row.unreadable for row in rows] == [None, mark], "a mark of another topic is not it"
    assert rows[1].as_json()["unreadable"] == {
        "member": "m1",
        "since": "2026-08-01T12:00:00Z",
        "broker": 2,
        "error": "RequestTimedOutError",
    }
    found = judge("t", 1, [rows[1].sample(), rows[1].sample()], Thresholds())
    assert found.status is Status.UNREADABLE
    assert found.severity is Severity.ERROR
    assert found.detail() == (
        "m1 cannot read it since 2026-08-01T12:00:00Z (broker 2, RequestTimedOutError)"
    )
    assert "cannot read it" in rows[1].control_text()
    assert judge("t", 0, [rows[0].sample(), rows[0].sample()], Thresholds()).status is Status.OK
