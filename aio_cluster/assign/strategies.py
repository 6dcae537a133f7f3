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

from .racks import Placement, arrange, local_first, top_up

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
    barred: Mapping[str, Collection[int]] | None = None,
    racks: Placement | None = None,
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

    A member ``barred`` from partitions (it cannot read them, see `aio_cluster.assign.marks`)
    is given none of them and gives up those it holds; its share shrinks to what it may take,
    and the members that may take more share the difference, fewest first. The partitions fewest
    members may take are dealt first, so each goes where it may; should none be left below its
    share that may take one, it goes to the one that may with the fewest.

    Args:
        partitions: the topic's partition ids (duplicates and order do not matter).
        members: the live members, oldest first; ties (equal holdings) go to the older member,
            and the freed partitions are dealt in this order, so the result is deterministic.
        previous: partition -> owner of the last assignment; owners not among ``members`` and
            partitions no longer in ``partitions`` are ignored.
        loads: member -> the partitions it holds of other topics (none: no other topics).
        away: those of ``members`` that are absent (ignored when every member is).
        barred: member -> partitions it must not be given (none: no member is barred).
        racks: the members' racks and the partitions' replicas' racks (none: no racks).

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
    reach = racks.reach(held, free) if racks is not None and racks.applies(ordered) else {}
    # Stable: ties go to the member that reaches more local partitions, then to the older one.
    by_holding = sorted(
        ordered, key=lambda m: (elsewhere.get(m, 0), -len(held[m]), -reach.get(m, 0))
    )
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
    bars = {m: set(ps) & set(wanted) for m, ps in (barred or {}).items() if m in held}
    if any(bars.values()):
        _bar(wanted, held, free, quota, bars, [m for m in by_holding if m not in away])
    elif racks is not None and racks.applies(ordered) and racks.optimised(held, free):
        return arrange(held, free, quota, ordered, racks, away if present else ())
    for member in ordered:
        keep = quota[member]
        held[member] = local_first(held[member], member, racks)
        free.extend(held[member][keep:])
        del held[member][keep:]
    free.sort()
    if any(bars.values()):
        _deal_barred(free, held, quota, bars, ordered, racks)
        free = []
    top_up(ordered, held, free, quota)
    return {member: sorted(owned) for member, owned in held.items()}


def _bar(
    wanted: list[int],
    held: dict[str, list[int]],
    free: list[int],
    quota: dict[str, int],
    bars: Mapping[str, set[int]],
    takers: list[str],
) -> None:
    """`sticky()`'s bars: each barred member gives up what it may not hold, its quota shrinks to
    what it may take, and ``takers`` (by rank) take up the difference, the fewest first."""
    cap = {member: len(wanted) - len(bars.get(member, ())) for member in held}
    deficit = 0
    for member, owned in held.items():
        barred_here = bars.get(member, set())
        free.extend(p for p in owned if p in barred_here)
        owned[:] = [p for p in owned if p not in barred_here]
        if quota[member] > cap[member]:
            deficit += quota[member] - cap[member]
            quota[member] = cap[member]
    while deficit:
        open_ = [member for member in takers if quota[member] < cap[member]]
        if not open_:
            break
        quota[min(open_, key=lambda member: quota[member])] += 1
        deficit -= 1


def _deal_barred(
    free: list[int],
    held: dict[str, list[int]],
    quota: Mapping[str, int],
    bars: Mapping[str, set[int]],
    ordered: list[str],
    racks: Placement | None,
) -> None:
    """Deal ``free`` among the members none of whom may take a partition it is barred from:
    the partitions fewest members may take first, each to the first member (oldest first,
    those in one of its replicas' racks before the others) below its quota that may take it,
    else to the one that may with the fewest."""

    def takers(partition: int) -> list[str]:
        found = [m for m in ordered if partition not in bars.get(m, ())]
        return found or ordered  # barred everywhere (never from the marks): anyone

    for partition in sorted(free, key=lambda p: (len(takers(p)), p)):
        may = takers(partition)
        below = [m for m in may if len(held[m]) < quota[m]]
        if racks is not None:
            below.sort(key=lambda m: not racks.local(partition, m))
        chosen = below[0] if below else min(may, key=lambda m: len(held[m]))
        held[chosen].append(partition)


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
    strategy: Strategy,
    partitions: Collection[int],
    members: Collection[str],
    barred: Mapping[str, Collection[int]] | None = None,
) -> dict[str, list[int]]:
    """Assign ``partitions`` to ``members`` with ``strategy``.

    See [Strategy][aio_cluster.Strategy] for what each one does. With ``barred`` (member ->
    partitions it cannot read, see `aio_cluster.assign.marks`), the strategy's assignment is
    the start from which `sticky()` moves only what the bars (and the balance) need.
    """
    found = strategy.function(partitions, members)
    if not barred or not any(barred.values()):
        return found
    previous = {p: member for member, ps in found.items() for p in ps}
    return sticky(partitions, sorted(set(members)), previous, barred=barred)
