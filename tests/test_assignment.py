"""Properties of the pure assignment strategies (no servers)."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aio_cluster.assign.strategies import Strategy, assign, balanced_range

partitions_st = st.sets(st.integers(min_value=0, max_value=500), max_size=64)
members_st = st.sets(
    st.text(alphabet="abcdefgh-0123456789", min_size=1, max_size=12), min_size=1, max_size=16
)


@pytest.mark.parametrize("strategy", list(Strategy))
@given(partitions=partitions_st, members=members_st)
def test_disjoint_complete_balanced(
    strategy: Strategy, partitions: set[int], members: set[str]
) -> None:
    result = assign(strategy, partitions, members)
    assert set(result) == members
    owned = [p for ps in result.values() for p in ps]
    assert len(owned) == len(set(owned)), "a partition went to two members"
    assert set(owned) == partitions, "a partition went to nobody"
    sizes = [len(ps) for ps in result.values()]
    assert max(sizes) - min(sizes) <= 1
    assert all(ps == sorted(ps) for ps in result.values())


@pytest.mark.parametrize("strategy", list(Strategy))
@given(partitions=partitions_st, members=members_st, seed=st.integers())
def test_deterministic_under_permutation(
    strategy: Strategy, partitions: set[int], members: set[str], seed: int
) -> None:
    rng = random.Random(seed)
    shuffled_p = list(partitions)
    shuffled_m = list(members)
    rng.shuffle(shuffled_p)
    rng.shuffle(shuffled_m)
    # Duplicates in the input (a member listed twice) change nothing either.
    assert assign(strategy, shuffled_p + shuffled_p[:3], shuffled_m + shuffled_m[:1]) == assign(
        strategy, sorted(partitions), sorted(members)
    )


def test_no_members_owns_nothing() -> None:
    assert assign(Strategy.RANGE, [0, 1], []) == {}
    assert assign(Strategy.ROUND_ROBIN, [0, 1], []) == {}


def test_range_is_contiguous_first_members_get_more() -> None:
    assert balanced_range(range(10), ["c", "a", "b"]) == {
        "a": [0, 1, 2, 3],
        "b": [4, 5, 6],
        "c": [7, 8, 9],
    }


def test_round_robin_deals_in_turn() -> None:
    assert assign(Strategy.ROUND_ROBIN, range(5), ["b", "a"]) == {"a": [0, 2, 4], "b": [1, 3]}


def _seed_pick(pnum: int, cids: list[str], cid: str) -> list[int]:
    """poseidon_cluster 0.3.0's ``ConsumerGroup.pick``, transcribed as the reference."""
    cids = sorted(cids)
    pos = cids.index(cid)
    step = math.ceil(pnum / len(cids))
    first, last = pos * step, min((pos + 1) * step - 1, pnum - 1)
    return list(range(first, last + 1)) if last >= first else []


# (partitions, members) where the seed's ceil-sized steps are balanced too.
SEED_AGREES = [(1, 1), (2, 1), (2, 2), (4, 2), (5, 2), (6, 3), (7, 4), (10, 5), (12, 4), (3, 2)]
# Where they are not, the seed left members idle: P=4 on 3 members gave [0,1] [2,3] [].
SEED_IDLES = [(4, 3), (5, 4), (10, 4), (9, 4)]


@pytest.mark.parametrize(("pnum", "mnum"), SEED_AGREES)
def test_agrees_with_seed_where_seed_is_balanced(pnum: int, mnum: int) -> None:
    members = [f"m{i}" for i in range(mnum)]
    ours = balanced_range(range(pnum), members)
    for member in members:
        assert ours[member] == _seed_pick(pnum, members, member)


@pytest.mark.parametrize(("pnum", "mnum"), SEED_IDLES)
def test_balanced_where_seed_left_members_idle(pnum: int, mnum: int) -> None:
    members = [f"m{i}" for i in range(mnum)]
    seed_sizes = [len(_seed_pick(pnum, members, m)) for m in members]
    ours = [len(ps) for ps in balanced_range(range(pnum), members).values()]
    assert max(seed_sizes) - min(seed_sizes) > 1
    assert max(ours) - min(ours) <= 1


@given(pnum=st.integers(0, 200), mnum=st.integers(1, 30))
def test_seed_table_wherever_seed_is_balanced(pnum: int, mnum: int) -> None:
    members = [f"m{i:02d}" for i in range(mnum)]
    seed = {m: _seed_pick(pnum, members, m) for m in members}
    sizes = [len(v) for v in seed.values()]
    if max(sizes) - min(sizes) <= 1:
        assert balanced_range(range(pnum), members) == seed
