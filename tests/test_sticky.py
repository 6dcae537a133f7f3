"""Properties of the sticky assignment and of the published target it feeds (pure, no servers)."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from aio_cluster.assign.strategies import sticky
from aio_cluster.assign.target import StickyTarget, follows, leader, next_target, publishes

partitions_st = st.sets(st.integers(min_value=0, max_value=400), max_size=120)
members_st = st.lists(
    st.text(alphabet="abcdefgh-0123456789", min_size=1, max_size=8),
    min_size=1,
    max_size=20,
    unique=True,
)


def owners_of(result: dict[str, list[int]]) -> dict[int, str]:
    return {p: member for member, ps in result.items() for p in ps}


def moved(before: dict[int, str], after: dict[int, str], live: list[str]) -> int:
    """Partitions (still in the topic) taken from a live member: what pauses a member."""
    return sum(1 for p, owner in before.items() if owner in live and after.get(p, owner) != owner)


def lower_bound(partitions: set[int], members: list[str], previous: dict[int, str]) -> int:
    """The fewest partitions any balanced assignment takes from live members.

    A balanced result gives ``P mod M`` members ``P // M + 1`` and the rest ``P // M``; a member
    holding ``c`` of the partitions with a share ``q`` loses at least ``max(0, c - q)``, and the
    sum is least when the larger shares go to the larger holdings (exchange argument).
    """
    held = sorted(
        (sum(1 for p in partitions if previous.get(p) == m) for m in members), reverse=True
    )
    share, extra = divmod(len(partitions), len(members))
    return sum(max(0, c - share - (1 if rank < extra else 0)) for rank, c in enumerate(held))


@given(partitions=partitions_st, members=members_st, data=st.data())
def test_balanced_complete_and_minimal_from_any_history(
    partitions: set[int], members: list[str], data: st.DataObject
) -> None:
    # Any history: lopsided holdings, owners gone, partitions gone from the topic.
    owner_st = st.sampled_from([*members, "gone"]) | st.sampled_from(members[:1])
    previous = data.draw(st.dictionaries(st.integers(0, 450), owner_st))
    result = sticky(partitions, members, previous)
    assert list(result) == members
    owned = [p for ps in result.values() for p in ps]
    assert sorted(owned) == sorted(partitions), "a partition went to nobody or to two members"
    sizes = [len(ps) for ps in result.values()]
    assert max(sizes) - min(sizes) <= 1
    assert all(ps == sorted(ps) for ps in result.values())
    assert moved(previous, owners_of(result), members) == lower_bound(partitions, members, previous)


@given(pnum=st.integers(0, 1200), mnum=st.integers(1, 40))
def test_a_join_moves_only_what_the_newcomer_takes(pnum: int, mnum: int) -> None:
    members = [f"m{i:02d}" for i in range(mnum)]
    before = owners_of(sticky(range(pnum), members, {}))
    after = owners_of(sticky(range(pnum), [*members, "new"], before))
    changed = {p for p in before if after[p] != before[p]}
    # Each moved partition goes to the newcomer, which gets its share: P // (M+1), the least
    # a balanced result can give it.
    assert all(after[p] == "new" for p in changed)
    assert len(changed) == pnum // (mnum + 1)
    # Taken evenly from those with the most: nobody gives up more than one more than another.
    lost = [sum(1 for p in changed if before[p] == m) for m in members]
    assert max(lost) - min(lost) <= 1


def test_the_issues_figures_1000_partitions_20_members() -> None:
    members = [f"m{i:02d}" for i in range(20)]
    before = owners_of(sticky(range(1000), members, {}))
    after = owners_of(sticky(range(1000), [*members, "m20"], before))
    assert sum(1 for p in before if after[p] != before[p]) == 47  # <= ceil(1000 / 21) = 48


@given(pnum=st.integers(0, 1200), mnum=st.integers(2, 40), data=st.data())
def test_a_leave_spreads_only_the_leavers_partitions(
    pnum: int, mnum: int, data: st.DataObject
) -> None:
    members = [f"m{i:02d}" for i in range(mnum)]
    before = owners_of(sticky(range(pnum), members, {}))
    leaver = data.draw(st.sampled_from(members))
    rest = [m for m in members if m != leaver]
    after = owners_of(sticky(range(pnum), rest, before))
    assert {p for p in before if after[p] != before[p]} == {
        p for p, owner in before.items() if owner == leaver
    }
    sizes = [sum(1 for o in after.values() if o == m) for m in rest]
    assert max(sizes) - min(sizes) <= 1


@given(
    partitions=partitions_st,
    members=members_st,
    previous=st.dictionaries(st.integers(0, 450), st.sampled_from(["a", "b", "c", "gone"])),
    seed=st.integers(),
)
def test_deterministic_whatever_the_order_of_partitions_and_history(
    partitions: set[int], members: list[str], previous: dict[int, str], seed: int
) -> None:
    rng = random.Random(seed)
    shuffled = list(partitions)
    rng.shuffle(shuffled)
    items = list(previous.items())
    rng.shuffle(items)
    expected = sticky(sorted(partitions), members, previous)
    assert sticky(shuffled + shuffled[:2], members, dict(items)) == expected
    assert sticky(partitions, [*members, *members[:1]], previous) == expected


def test_ties_go_to_the_older_member() -> None:
    assert sticky(range(5), ["old", "young"], {}) == {"old": [0, 1, 2], "young": [3, 4]}
    assert sticky([], ["a"], {}) == {"a": []}
    assert sticky([1], [], {}) == {}


def test_the_leader_is_the_oldest() -> None:
    assert leader(["oldest", "middle", "youngest"]) == "oldest"
    assert leader([]) is None


def test_next_target_counts_versions_and_keeps_a_fitting_target() -> None:
    first = next_target(None, range(4), ["a"])
    assert first == StickyTarget(version=0, members=("a",), owners=dict.fromkeys(range(4), "a"))
    assert next_target(first, range(4), ["a"]) is None
    second = next_target(first, range(4), ["a", "b"])
    assert second is not None
    assert second.version == 1
    assert second.members == ("a", "b")
    assert second.partitions_of("a") == [0, 1]
    assert second.partitions_of("b") == [2, 3]
    # A new partition is a change too, and goes to the member below its share.
    third = next_target(second, range(5), ["a", "b"])
    assert third is not None
    assert third.version == 2
    assert third.owners == {0: "a", 1: "a", 2: "b", 3: "b", 4: "a"}


@given(pnum=st.integers(0, 60), mnum=st.integers(1, 8))
def test_after_a_join_old_members_only_give_up(pnum: int, mnum: int) -> None:
    members = [f"m{i}" for i in range(mnum)]
    old = next_target(None, range(pnum), members)
    assert old is not None
    new = next_target(old, range(pnum), [*members, "late"])
    assert new is not None
    for member in members:
        assert set(new.partitions_of(member)) <= set(old.partitions_of(member))
    assert len(new.partitions_of("late")) == pnum // (mnum + 1)


@given(pnum=st.integers(1, 60), mnum=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_a_lost_target_republished_from_the_owners_moves_nothing(
    pnum: int, mnum: int, seed: int
) -> None:
    members = [f"m{i}" for i in range(mnum)]
    rng = random.Random(seed)
    settled = next_target(None, range(pnum), rng.sample(members, mnum))
    assert settled is not None
    # The node is gone; the claim nodes still say who owns what (for any balanced history).
    again = next_target(None, range(pnum), members, settled.owners)
    assert again is not None
    assert again.owners == settled.owners


def test_no_partitions_never_replace_a_target_that_has_some() -> None:
    published = next_target(None, range(4), ["a", "b"])
    assert published is not None
    assert next_target(published, [], ["a", "b"]) is None
    assert next_target(published, [], ["a", "b", "c"]) is None
    # With nothing published yet there is nothing to release: an empty target is fine.
    assert next_target(None, [], ["a"]) == StickyTarget(version=0, members=("a",), owners={})


def test_the_kth_oldest_publishes_after_k_takeover_periods() -> None:
    members = ["oldest", "next", "third"]
    assert publishes("oldest", members, 0.0, 60.0)
    assert not publishes("next", members, 59.9, 60.0)
    assert publishes("next", members, 60.0, 60.0)
    assert not publishes("third", members, 60.0, 60.0)
    assert publishes("third", members, 120.0, 60.0)
    assert not publishes("stranger", members, 1e9, 60.0)
    published = next_target(None, range(3), members[:2])
    assert follows(published, members[:2])
    assert not follows(published, members)
    assert not follows(None, members)


def test_topics_with_fewer_partitions_than_members_spread_over_the_group() -> None:
    """Targets computed one topic after another, each with the others' loads, balance every
    topic and the members' totals: a fifth member of 50 topics of 4 partitions gets its fifth."""
    topics = [f"t{i}" for i in range(50)]
    four = ["a", "b", "c", "d"]

    def publish(
        published: dict[str, StickyTarget | None], members: list[str]
    ) -> dict[str, StickyTarget | None]:
        result = dict(published)
        for topic in topics:
            loads: Counter[str] = Counter()
            for other, target in result.items():
                if other != topic and target is not None:
                    loads.update(target.owners.values())
            following = next_target(result[topic], range(4), members, loads=loads)
            result[topic] = following or result[topic]
        return result

    before = publish(dict.fromkeys(topics), four)
    after = publish(before, [*four, "e"])
    totals = Counter(o for t in after.values() if t for o in t.owners.values())
    assert sorted(totals.values()) == [40] * 5
    for target in after.values():
        assert target is not None
        assert max(Counter(target.owners.values()).values()) == 1, "each topic balanced"
    owners_before = {t: target.owners for t, target in before.items() if target is not None}
    moved = sum(
        1
        for topic, target in after.items()
        if target is not None
        for p in range(4)
        if owners_before[topic][p] != target.owners[p]
    )
    assert moved == 40, "the fewest moves that balance the totals"


@given(partitions=partitions_st, members=members_st, data=st.data())
def test_a_member_away_keeps_only_its_own_and_the_present_share_the_rest(
    partitions: set[int], members: list[str], data: st.DataObject
) -> None:
    """A member in its rejoin grace is given nothing it did not hold: a leaver's or a new
    partition would sit idle with it."""
    present = data.draw(st.lists(st.sampled_from(members), min_size=1, unique=True))
    away = [m for m in members if m not in present]
    owner_st = st.sampled_from([*members, "gone"])
    previous = data.draw(st.dictionaries(st.integers(0, 450), owner_st))
    result = sticky(partitions, members, previous, away=away)
    owned = [p for ps in result.values() for p in ps]
    assert sorted(owned) == sorted(partitions), "a partition went to nobody or to two members"
    for member in away:
        assert set(result[member]) <= {p for p, o in previous.items() if o == member}
    sizes = [len(result[m]) for m in present]
    assert max(sizes) - min(sizes) <= 1


def test_a_leavers_and_new_partitions_go_to_members_present_not_one_in_its_grace() -> None:
    first = next_target(None, range(12), ["a", "b", "n"], graces={"n": 30.0}, now_ms=1_000)
    assert first is not None
    held = first.partitions_of("n")
    gone = next_target(first, range(12), ["a", "b"], now_ms=2_000)
    assert gone is not None
    assert gone.absent == {"n": 32_000}

    left = next_target(gone, range(12), ["a"], now_ms=3_000)
    assert left is not None
    assert left.partitions_of("n") == held, "the member in its grace got the leaver's"
    assert len(left.partitions_of("a")) == 8

    grown = next_target(gone, range(15), ["a", "b"], now_ms=3_000)
    assert grown is not None
    assert grown.partitions_of("n") == held, "the member in its grace got a new partition"
    assert sorted(len(grown.partitions_of(m)) for m in ("a", "b")) == [5, 6]

    back = next_target(grown, range(15), ["a", "b", "n"], graces={"n": 30.0}, now_ms=4_000)
    assert back is not None
    assert sorted(Counter(back.owners.values()).values()) == [5, 5, 5], "balanced once back"
    assert set(held) <= set(back.partitions_of("n"))
