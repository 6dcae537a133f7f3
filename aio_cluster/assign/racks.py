"""Racks: which member reads each partition from a replica in its own rack. Pure.

A member given a ``rack`` fetches from the replica in its rack (Kafka's KIP-392), when a
partition has one there; otherwise from the leader, wherever it is. Bytes read across racks
(zones, in a cloud) are billed, so the sticky assignment gives each partition, where it can, to a
member in a rack that holds one of its replicas (a *local* member).

The sticky target keeps three things, in this order:

1. **Balance**: the shares are those `sticky()` decides without racks (differing by at most
   one, the larger ones to the members that held the most).
2. **Locality**: among the assignments with those shares, one with the most partitions on a
   local member.
3. **Stickiness**: among those, one that moves the fewest partitions between racks, then the
   fewest within each rack.

So a join or a leave moves what the balance needs and, where a choice is open, moves partitions
to (or keeps them with) local members; it moves more only where that makes partitions local:
a partition left on a member outside its replicas' racks (its replicas were reassigned, or the
assignment came from a release without racks) moves to a local member when the shares allow it,
even if another partition has to go the other way to keep them. Members without a rack, and
partitions whose replicas are in no member's rack, are placed by the balance and stickiness
alone. Balance wins where it and locality disagree: three members in rack ``a`` and one in
``b`` each get a quarter, though every replica is in ``a``.

The problem is solved on classes, not partitions: the partitions whose replicas share the same
racks and are held in the same rack are alike, and so are the members of one rack. A minimum
cost flow over those classes decides how many partitions of each class each rack takes; then each
rack shares its partitions among its members as `sticky()` does. The classes number a few dozen
with three zones, but grow as the cube of the racks with three replicas (hundreds with eight
racks, and seconds of the leader's time with ten): beyond `MAX_CLASSES` the target is not
optimised for racks, which then only decide which partitions a member over its share gives up
(its local ones last, `local_first`) and break ties between equal holdings.
"""

from __future__ import annotations

import collections
import heapq
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

__all__ = ["Placement", "arrange", "local_first", "top_up"]

_S = TypeVar("_S")
_G = TypeVar("_G")

_FREE = object()
"""The holder of a partition no present member holds (new, or a leaver's): it moves anyway."""

MAX_CLASSES = 128
"""The most classes of partitions (see the module) the target is optimised over for racks: at
128, a target of 3,000 partitions over 60 members took the leader at most about 70 ms (five to
eight racks, three replicas); past it, ten racks took seconds."""


@dataclass(frozen=True)
class Placement:
    """Where the members and the partitions' replicas are.

    Attributes:
        members: member -> its rack, for the members that have one.
        replicas: partition -> the racks of its replicas (brokers without a rack left out).
    """

    members: Mapping[str, str] = field(default_factory=dict)
    replicas: Mapping[int, frozenset[str]] = field(default_factory=dict)

    def local(self, partition: int, member: str) -> bool:
        """Whether ``member`` is in a rack that holds a replica of ``partition``."""
        rack = self.members.get(member)
        return rack is not None and rack in self.replicas.get(partition, ())

    def applies(self, members: Iterable[str]) -> bool:
        """Whether some of ``members`` is in a rack that holds some replica: otherwise racks
        change nothing."""
        racks = {self.members[m] for m in members if m in self.members}
        return bool(racks) and any(not racks.isdisjoint(rs) for rs in self.replicas.values())

    def optimised(self, held: Mapping[str, list[int]], free: Collection[int]) -> bool:
        """Whether a target over ``held`` (member -> partitions) and ``free`` is optimised for
        racks: it has at most `MAX_CLASSES` classes of partitions (see the module)."""
        racks = {self.members[m] for m in held if m in self.members}
        kinds = {
            (self.replicas.get(p, frozenset()) & racks, self.members.get(m, _FREE))
            for m, ps in held.items()
            for p in ps
        }
        kinds.update((self.replicas.get(p, frozenset()) & racks, _FREE) for p in free)
        return len(kinds) <= MAX_CLASSES

    def reach(self, held: Mapping[str, list[int]], free: Collection[int]) -> dict[str, int]:
        """member -> how many of the partitions it holds and of the ``free`` ones are local
        to it: among members that hold as many, the larger shares go to those that reach
        more, which moves no more partitions and keeps more of them local."""
        free_in = collections.Counter(r for p in free for r in self.replicas.get(p, ()))
        return {
            member: sum(self.local(p, member) for p in ps) + free_in[self.members.get(member, "")]
            for member, ps in held.items()
        }


def local_first(partitions: list[int], member: str, placement: Placement | None) -> list[int]:
    """``partitions`` with those local to ``member`` first (each part in id order): the order in
    which a member over its share keeps them."""
    if placement is None:
        return partitions
    return sorted(partitions, key=lambda p: (not placement.local(p, member), p))


def arrange(
    held: Mapping[str, list[int]],
    free: Collection[int],
    quota: Mapping[str, int],
    members: Sequence[str],
    placement: Placement,
    away: Collection[str] = (),
) -> dict[str, list[int]]:
    """Every member's sorted partitions: each exactly its ``quota``, the most local (see the
    module), then the fewest moved.

    Args:
        held: member -> the partitions it holds (of those assigned).
        free: the partitions nobody of ``members`` holds.
        quota: member -> how many it gets (they add up to every partition).
        members: oldest first: ties go to the older member.
        placement: the members' and the replicas' racks.
        away: members in their rejoin grace: each keeps ``quota`` of what it holds (local
            first) and is given nothing.
    """
    result: dict[str, list[int]] = {}
    holder: dict[int, str | None] = dict.fromkeys(free)
    for member in members:
        if member in away:
            kept = local_first(held[member], member, placement)
            result[member] = kept[: quota[member]]
            holder.update(dict.fromkeys(kept[quota[member] :]))
        else:
            holder.update(dict.fromkeys(held[member], member))
    present = [m for m in members if m not in away]
    rack_of = {m: placement.members.get(m) for m in present}
    racks = {r for r in rack_of.values() if r is not None}
    groups = list(dict.fromkeys(rack_of.values()))
    capacity = collections.Counter(dict.fromkeys(groups, 0))
    for member in present:
        capacity[rack_of[member]] += quota[member]
    sources: dict[tuple[frozenset[str], object], list[int]] = collections.defaultdict(list)
    for partition in sorted(holder):
        owner = holder[partition]
        shared = placement.replicas.get(partition, frozenset()) & racks
        sources[shared, _FREE if owner is None else rack_of[owner]].append(partition)
    far = len(holder) + 1  # a partition placed away from its racks costs more than any moves

    def cost(source: tuple[frozenset[str], object], group: str | None) -> int:
        shared, origin = source
        return (0 if group in shared else far) + (0 if origin in (_FREE, group) else 1)

    flows = _transport(
        {s: len(ps) for s, ps in sources.items()}, {g: capacity[g] for g in groups}, cost
    )
    incoming: dict[str | None, list[int]] = {g: [] for g in groups}
    holdings = {m: list(held[m]) for m in present}
    for source, partitions in sources.items():
        shared, origin = source
        sent = flows.get(source, {})
        if origin is _FREE:
            for group in groups:
                count = sent.get(group, 0)
                incoming[group] += partitions[:count]
                del partitions[:count]
            continue
        for group in groups:
            if group != origin and sent.get(group):
                taken = _give_up(partitions, sent[group], holder, holdings, quota, present)
                incoming[group] += taken
    for group in groups:
        rack = [m for m in present if rack_of[m] == group]
        result.update(_share_out(rack, holdings, incoming[group], quota))
    return {member: sorted(result[member]) for member in members}


def _give_up(
    partitions: list[int],
    count: int,
    holder: Mapping[int, str | None],
    holdings: dict[str, list[int]],
    quota: Mapping[str, int],
    members: Sequence[str],
) -> list[int]:
    """``count`` of ``partitions`` (alike, held in one rack, sorted) taken from their
    ``holder``, each from the one most over its quota (the younger on a tie), its highest id
    first."""
    rank = {m: index for index, m in enumerate(members)}
    mine: dict[str, list[int]] = collections.defaultdict(list)
    for partition in partitions:
        owner = holder[partition]
        if owner is not None:
            mine[owner].append(partition)

    def entry(member: str) -> tuple[int, int, str]:
        return (quota[member] - len(holdings[member]), -rank[member], member)

    heap = [entry(m) for m in mine]
    heapq.heapify(heap)
    taken: list[int] = []
    while len(taken) < count:
        entry_now = heapq.heappop(heap)
        giver = entry_now[2]
        if entry_now != entry(giver):  # its surplus changed since: look again
            heapq.heappush(heap, entry(giver))
            continue
        partition = mine[giver].pop()
        holdings[giver].remove(partition)
        taken.append(partition)
        if mine[giver]:
            heapq.heappush(heap, entry(giver))
    gone = set(taken)
    partitions[:] = [p for p in partitions if p not in gone]
    return taken


def _share_out(
    members: list[str], holdings: Mapping[str, list[int]], pool: list[int], quota: Mapping[str, int]
) -> dict[str, list[int]]:
    """One rack's partitions among its ``members`` (oldest first), as `sticky()` shares them:
    each keeps what it holds up to its quota (lowest ids first), the rest of what it holds and
    the ``pool`` (the partitions coming in) go to those below."""
    result: dict[str, list[int]] = {}
    for member in members:
        kept = sorted(holdings[member])
        result[member] = kept[: quota[member]]
        pool += kept[quota[member] :]
    pool.sort()
    top_up(members, result, pool, quota)
    return result


def top_up(
    members: Sequence[str],
    held: Mapping[str, list[int]],
    pool: list[int],
    quota: Mapping[str, int],
) -> None:
    """Deal ``pool`` (in its order) to ``members`` (in theirs), each filled up to its quota."""
    for member in members:
        missing = quota[member] - len(held[member])
        held[member].extend(pool[:missing])
        del pool[:missing]


def _transport(
    supply: Mapping[_S, int], capacity: Mapping[_G, int], cost: Callable[[_S, _G], int]
) -> dict[_S, dict[_G, int]]:
    """The cheapest way to send every source's supply to the groups within their capacities
    (which add up to the supply): source -> group -> how many. Successive shortest paths
    (Bellman-Ford, as the residual costs go negative) over the classes of partitions and the
    racks, not the partitions and the members: at most `MAX_CLASSES` sources."""
    sources, groups = list(supply), list(capacity)
    first = 2 + len(sources)  # node 0 is the start, node 1 the end, then sources, then groups
    graph: list[list[list[int]]] = [[] for _ in range(first + len(groups))]

    def add(u: int, v: int, cap: int, price: int) -> None:
        graph[u].append([v, cap, price, len(graph[v])])
        graph[v].append([u, 0, -price, len(graph[u]) - 1])

    for i, source in enumerate(sources):
        add(0, 2 + i, supply[source], 0)
        for j, group in enumerate(groups):
            add(2 + i, first + j, supply[source], cost(source, group))
    for j, group in enumerate(groups):
        add(first + j, 1, capacity[group], 0)
    while (path := _cheapest_path(graph)) is not None:
        amount = min(graph[u][k][1] for u, k in path)
        for u, k in path:
            edge = graph[u][k]
            edge[1] -= amount
            graph[edge[0]][edge[3]][1] += amount
    flows: dict[_S, dict[_G, int]] = {}
    for i, source in enumerate(sources):
        for v, cap, _price, _rev in graph[2 + i]:
            if v >= first and cap < supply[source]:
                flows.setdefault(source, {})[groups[v - first]] = supply[source] - cap
    return flows


def _cheapest_path(graph: list[list[list[int]]]) -> list[tuple[int, int]] | None:
    """The cheapest path from node 0 to node 1 over edges with room left, as (node, edge
    index) steps; None when there is none."""
    far = float("inf")
    dist = [far] * len(graph)
    back: list[tuple[int, int] | None] = [None] * len(graph)
    dist[0] = 0
    for _ in range(len(graph)):
        changed = False
        for u, edges in enumerate(graph):
            if dist[u] == far:
                continue
            for k, (v, cap, price, _rev) in enumerate(edges):
                if cap > 0 and dist[u] + price < dist[v]:
                    dist[v] = dist[u] + price
                    back[v] = (u, k)
                    changed = True
        if not changed:
            break
    if dist[1] == far:
        return None
    path = []
    node = 1
    while (step := back[node]) is not None:
        path.append(step)
        node = step[0]
    return path
