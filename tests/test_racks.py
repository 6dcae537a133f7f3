"""Properties of the rack-aware sticky assignment (pure, no servers): the shares are those
without racks, the most partitions a member in one of their replicas' racks that those shares
allow, and the fewest moves among such assignments."""

from __future__ import annotations

import itertools
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from test_sticky import lower_bound, moved, owners_of

from aio_cluster.assign.racks import Placement
from aio_cluster.assign.strategies import sticky
from aio_cluster.assign.target import next_target

RACKS = ["a", "b", "c", "d"]
racks_st = st.sets(st.sampled_from(RACKS), max_size=3).map(frozenset)


def local_count(result: dict[str, list[int]], placement: Placement) -> int:
    return sum(placement.local(p, m) for m, ps in result.items() for p in ps)


@st.composite
def situations(
    draw: st.DrawFn, max_partitions: int = 40, max_members: int = 8
) -> tuple[list[int], list[str], dict[int, str], Placement]:
    """Partitions, members (oldest first), any history, and racks for some of them."""
    partitions = sorted(draw(st.sets(st.integers(0, 60), max_size=max_partitions)))
    count = draw(st.integers(1, max_members))
    members = [f"m{i}" for i in range(count)]
    previous = draw(st.dictionaries(st.sampled_from(partitions or [0]), st.sampled_from(members)))
    member_racks = draw(
        st.fixed_dictionaries({}, optional={m: st.sampled_from([*RACKS, "z"]) for m in members})
    )
    replicas = {p: draw(racks_st) for p in partitions}
    return partitions, members, previous, Placement(member_racks, replicas)


def max_local(partitions: list[int], sizes: dict[str, int], placement: Placement) -> int:
    """The most partitions local to their member over every assignment with these ``sizes``,
    by augmenting paths over (partition, member) pairs: an independent check."""
    slots = [m for m, size in sizes.items() for _ in range(size)]
    match: dict[int, int] = {}  # slot -> partition

    def augment(partition: int, seen: set[int]) -> bool:
        for index, member in enumerate(slots):
            if index in seen or not placement.local(partition, member):
                continue
            seen.add(index)
            if index not in match or augment(match[index], seen):
                match[index] = partition
                return True
        return False

    return sum(augment(p, set()) for p in partitions)


@given(situations())
def test_the_shares_stay_those_without_racks_and_locality_is_the_most_they_allow(
    situation: tuple[list[int], list[str], dict[int, str], Placement],
) -> None:
    partitions, members, previous, placement = situation
    plain = sticky(partitions, members, previous)
    result = sticky(partitions, members, previous, racks=placement)
    assert list(result) == members
    assert sorted(p for ps in result.values() for p in ps) == partitions
    assert all(ps == sorted(ps) for ps in result.values())
    sizes = {m: len(ps) for m, ps in result.items()}
    assert sorted(sizes.values()) == sorted(len(ps) for ps in plain.values())
    # Locality before stickiness (see aio_cluster.assign.racks): a move past the fewest that
    # balance needs must have bought locality, which the brute force below checks is the most
    # for those moves; where the result is no more local than without racks, no such move.
    assert local_count(result, placement) == max_local(partitions, sizes, placement)
    if local_count(result, placement) == local_count(plain, placement):
        assert moved(previous, owners_of(result), members) <= lower_bound(
            set(partitions), members, previous
        )
    if not placement.applies(members):
        assert result == plain, "racks nobody shares changed the assignment"


@settings(max_examples=60)
@given(situations(max_partitions=7, max_members=3))
def test_among_the_most_local_it_moves_the_fewest(
    situation: tuple[list[int], list[str], dict[int, str], Placement],
) -> None:
    partitions, members, previous, placement = situation
    result = sticky(partitions, members, previous, racks=placement)
    sizes = Counter({m: len(ps) for m, ps in result.items()})
    best = local_count(result, placement)
    fewest = None
    for owners in itertools.product(members, repeat=len(partitions)):
        if Counter(owners) != sizes:
            continue
        candidate = dict(zip(partitions, owners, strict=True))
        if sum(placement.local(p, m) for p, m in candidate.items()) < best:
            continue
        moves = moved(previous, candidate, members)
        fewest = moves if fewest is None else min(fewest, moves)
    assert moved(previous, owners_of(result), members) == fewest


def rf2(partitions: int) -> Placement:
    """Three racks, each partition's two replicas in two of them, spread round."""
    racks = ["a", "b", "c"]
    return Placement(
        {"in-a": "a", "in-b": "b", "in-c": "c"},
        {p: frozenset({racks[p % 3], racks[(p + 1) % 3]}) for p in range(partitions)},
    )


@settings(max_examples=40)
@given(pnum=st.integers(0, 60))
def test_replication_factor_two_members_joining_and_leaving(pnum: int) -> None:
    """The issue's second case: every partition in one of its replicas' racks, balanced, and a
    join moves only what it must. A leave moves a stayer's partition only where that puts more
    partitions in their racks than moving the leaver's alone would (with 12 partitions, never:
    see the next test)."""
    placement = rf2(pnum)
    partitions = range(pnum)
    owners: dict[int, str] = {}
    members: list[str] = []
    for newcomer in ["in-a", "in-b", "in-c"]:
        members.append(newcomer)
        result = sticky(partitions, members, owners, racks=placement)
        assert moved(owners, owners_of(result), members) == lower_bound(
            set(partitions), members, owners
        )
        sizes = {m: len(ps) for m, ps in result.items()}
        assert local_count(result, placement) == max_local(list(partitions), sizes, placement)
        owners = owners_of(result)
    assert local_count(result, placement) == pnum, "three racks: every partition local"
    for leaver in ["in-b", "in-a"]:
        members.remove(leaver)
        result = sticky(partitions, members, owners, racks=placement)
        plain = sticky(partitions, members, owners)
        gained = local_count(result, placement) - local_count(plain, placement)
        assert moved(owners, owners_of(result), members) <= gained, "a stayer's moved for nothing"
        sizes = {m: len(ps) for m, ps in result.items()}
        assert local_count(result, placement) == max_local(list(partitions), sizes, placement)
        owners = owners_of(result)


def test_the_issues_twelve_partitions_move_only_the_leavers() -> None:
    placement = rf2(12)
    owners: dict[int, str] = {}
    for members in (["in-a"], ["in-a", "in-b"], ["in-a", "in-b", "in-c"]):
        owners = owners_of(sticky(range(12), members, owners, racks=placement))
    for stayers in (["in-a", "in-c"], ["in-b", "in-c"], ["in-a", "in-b"]):
        result = sticky(range(12), stayers, owners, racks=placement)
        assert moved(owners, owners_of(result), stayers) == 0
        assert local_count(result, placement) == 12
        assert [len(ps) for ps in result.values()] == [6, 6]


def test_a_member_without_a_rack_and_a_rack_no_broker_has_take_their_share() -> None:
    placement = rf2(12)
    extra = Placement({**placement.members, "in-x": "x"}, placement.replicas)
    owners = owners_of(sticky(range(12), ["in-a", "in-b", "in-c"], {}, racks=placement))
    for newcomer, racks in (("no-rack", placement), ("in-x", extra)):
        result = sticky(range(12), ["in-a", "in-b", "in-c", newcomer], owners, racks=racks)
        assert [len(ps) for ps in result.values()] == [3, 3, 3, 3]
        assert moved(owners, owners_of(result), list(result)) == 3
        assert local_count(result, racks) == 9, "the others keep only local partitions"


@given(situations(), st.data())
def test_a_published_target_fits_until_a_reassignment_could_place_more(
    situation: tuple[list[int], list[str], dict[int, str], Placement], data: st.DataObject
) -> None:
    partitions, members, previous, placement = situation
    first = next_target(None, partitions, members, previous, racks=placement)
    assert first is not None
    assert next_target(first, partitions, members, racks=placement) is None
    moved_replicas = {p: data.draw(racks_st) for p in partitions}
    after = Placement(placement.members, moved_replicas)
    again = next_target(first, partitions, members, racks=after)
    sizes = Counter(first.owners.values())
    best = max_local(partitions, {m: sizes[m] for m in members}, after)
    found = first.owners if again is None else again.owners
    assert sum(after.local(p, m) for p, m in found.items()) == best
    if again is not None:
        assert Counter(again.owners.values()) == sizes, "a reassignment changed the shares"
        assert next_target(again, partitions, members, racks=after) is None


@given(situations(), st.data())
def test_bars_come_first(
    situation: tuple[list[int], list[str], dict[int, str], Placement], data: st.DataObject
) -> None:
    """A member barred from partitions (see `aio_cluster.assign.marks`) is given none of them,
    racks or not, and the shares are those the bars make."""
    partitions, members, previous, placement = situation
    victim = data.draw(st.sampled_from(members))
    cut_off = data.draw(st.sets(st.sampled_from(partitions))) if partitions else set()
    bars = {victim: cut_off} if len(members) > 1 else {}
    result = sticky(partitions, members, previous, barred=bars, racks=placement)
    plain = sticky(partitions, members, previous, barred=bars)
    assert sorted(p for ps in result.values() for p in ps) == partitions
    assert sorted(map(len, result.values())) == sorted(map(len, plain.values()))
    assert not set(result[victim]) & set(bars.get(victim, ()))
