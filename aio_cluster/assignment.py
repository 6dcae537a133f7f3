"""Which member owns which partition: pure functions, no I/O.

Every member of a group computes the same assignment from the same inputs (the sorted member ids
and partition ids it read from ZooKeeper and Kafka), so the group agrees without talking. A strategy
takes the partitions and the member ids in any order and returns, for every member, the sorted
partitions it owns; the result is a partition of the input: disjoint and complete.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection

__all__ = ["Strategy", "assign", "balanced_range", "round_robin"]


def balanced_range(partitions: Collection[int], members: Collection[str]) -> dict[str, list[int]]:
    """Contiguous runs of partitions, sizes differing by at most one.

    With P partitions and M members, each member gets floor(P/M) partitions in id order and the
    first P mod M members (in sorted id order) one more. Unlike poseidon_cluster's ceil-sized steps,
    no member is left idle while another holds two more than it.
    """
    ordered_members = sorted(set(members))
    ordered = sorted(set(partitions))
    if not ordered_members:
        return {}
    share, extra = divmod(len(ordered), len(ordered_members))
    result: dict[str, list[int]] = {}
    start = 0
    for index, member in enumerate(ordered_members):
        size = share + (1 if index < extra else 0)
        result[member] = ordered[start : start + size]
        start += size
    return result


def round_robin(partitions: Collection[int], members: Collection[str]) -> dict[str, list[int]]:
    """Partition ``i`` (in sorted order) goes to member ``i mod M`` (in sorted order)."""
    ordered_members = sorted(set(members))
    if not ordered_members:
        return {}
    result: dict[str, list[int]] = {member: [] for member in ordered_members}
    for index, partition in enumerate(sorted(set(partitions))):
        result[ordered_members[index % len(ordered_members)]].append(partition)
    return result


class Strategy(str, enum.Enum):
    """The assignment strategies; every member of a group must use the same one.

    The value is what a member publishes in its registration so that others can check it.
    """

    RANGE = "range"
    ROUND_ROBIN = "roundrobin"

    @property
    def function(self) -> Callable[[Collection[int], Collection[str]], dict[str, list[int]]]:
        """The pure function that implements the strategy."""
        return _FUNCTIONS[self]


_FUNCTIONS = {Strategy.RANGE: balanced_range, Strategy.ROUND_ROBIN: round_robin}


def assign(
    strategy: Strategy, partitions: Collection[int], members: Collection[str]
) -> dict[str, list[int]]:
    """Assign ``partitions`` to ``members`` with ``strategy``; see :class:`Strategy`."""
    return strategy.function(partitions, members)
