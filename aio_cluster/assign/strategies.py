"""Which member owns which partition: pure functions, no I/O.

Every member of a group computes the same assignment from the same inputs (the sorted member ids
and partition ids it read from ZooKeeper and Kafka), so the group agrees without talking. A strategy
takes the partitions and the member ids in any order and returns, for every member, the sorted
partitions it owns; the result is a partition of the input: disjoint and complete.

`sticky()` is different: it also takes the previous assignment and moves as few partitions as
a balanced result allows. Its result depends on history, so members cannot each compute it and
agree; one member computes it and publishes it (see `aio_cluster.assign.target`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Mapping, Sequence

__all__ = ["Strategy", "assign", "balanced_range", "round_robin", "sticky"]


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


def sticky(
    partitions: Collection[int],
    members: Sequence[str],
    previous: Mapping[int, str],
    loads: Mapping[str, int] | None = None,
    away: Collection[str] = (),
) -> dict[str, list[int]]:
    """A balanced assignment (sizes differing by at most one) that moves the fewest partitions.

    Every member keeps as many of its ``previous`` partitions as its share allows; the rest (the
    partitions of members gone, new partitions, and a member's excess) go to the members below
    their share. The larger shares (``P mod M`` of them) go to the members that held the most, so
    a join takes about ``P/(M+1)`` partitions, evenly from the members with the most, and a leave
    moves only the leaver's partitions. That is the fewest moves any balanced result allows: a
    member holding ``c`` with a share of ``q`` must give up ``max(0, c - q)``, and the sum is
    least when the larger shares go to the larger holdings.

    A member that reads several topics gets one target per topic. With ``loads`` (the
    partitions each member holds of the group's other topics) the larger shares go first to the
    members that hold the least elsewhere, then to the larger holdings: a topic with fewer
    partitions than members no longer leaves the same members idle in every topic (a fifth
    member of 50 topics of 4 partitions would get none), and the moves are the fewest that
    balance the members' totals.

    A member ``away`` (gone, but waiting out its rejoin grace) keeps what it holds of its share
    and is given nothing more: a leaver's or a new partition would sit idle with it. The members
    present share the rest, balanced among themselves.

    Args:
        partitions: the topic's partition ids (duplicates and order do not matter).
        members: the live members, oldest first; ties (equal holdings) go to the older member,
            and the freed partitions are dealt in this order, so the result is deterministic.
        previous: partition -> owner of the last assignment; owners not among ``members`` and
            partitions no longer in ``partitions`` are ignored.
        loads: member -> the partitions it holds of other topics (none: no other topics).
        away: those of ``members`` that are absent (ignored when every member is).

    Returns:
        Every member's sorted partitions.
    """
    ordered = list(dict.fromkeys(members))
    if not ordered:
        return {}
    wanted = sorted(set(partitions))
    held: dict[str, list[int]] = {member: [] for member in ordered}
    free: list[int] = []
    for partition in wanted:
        owner = previous.get(partition)
        if owner in held:
            held[owner].append(partition)
        else:
            free.append(partition)
    share, extra = divmod(len(wanted), len(ordered))
    elsewhere = loads or {}
    # Stable: ties go to the older member.
    by_holding = sorted(ordered, key=lambda m: (elsewhere.get(m, 0), -len(held[m])))
    quota = {member: share + (1 if rank < extra else 0) for rank, member in enumerate(by_holding)}
    present = [member for member in by_holding if member not in away]
    if present and len(present) < len(ordered):
        for member in ordered:
            if member in away:
                quota[member] = min(quota[member], len(held[member]))
        rest = len(wanted) - sum(quota[member] for member in ordered if member in away)
        share, extra = divmod(rest, len(present))
        quota.update(
            (member, share + (1 if rank < extra else 0)) for rank, member in enumerate(present)
        )
    for member in ordered:
        keep = quota[member]
        free.extend(held[member][keep:])
        del held[member][keep:]
    free.sort()
    for member in ordered:
        missing = quota[member] - len(held[member])
        held[member].extend(free[:missing])
        del free[:missing]
    return {member: sorted(owned) for member, owned in held.items()}


class Strategy(str, enum.Enum):
    """The assignment strategies; every member of a group must use the same one.

    The value is what a member publishes in its registration so that others can check it.
    """

    STICKY = "sticky"
    """The default: balanced, and a change moves the fewest partitions (`sticky()`)."""
    RANGE = "range"
    ROUND_ROBIN = "roundrobin"

    @property
    def function(self) -> Callable[[Collection[int], Collection[str]], dict[str, list[int]]]:
        """The pure function that implements the strategy; for sticky, the assignment from no
        history (what a group's first target is, with its members in id order)."""
        return _FUNCTIONS[self]


def _sticky_from_nothing(
    partitions: Collection[int], members: Collection[str]
) -> dict[str, list[int]]:
    return sticky(partitions, sorted(set(members)), {})


_FUNCTIONS = {
    Strategy.STICKY: _sticky_from_nothing,
    Strategy.RANGE: balanced_range,
    Strategy.ROUND_ROBIN: round_robin,
}


def assign(
    strategy: Strategy, partitions: Collection[int], members: Collection[str]
) -> dict[str, list[int]]:
    """Assign ``partitions`` to ``members`` with ``strategy``.

    See [Strategy][aio_cluster.Strategy] for what each one does.
    """
    return strategy.function(partitions, members)
