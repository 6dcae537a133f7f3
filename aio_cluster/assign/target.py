"""The published sticky target: who computes it, who follows it, and why that cannot race. Pure.

The oldest member computes the next target and publishes it; every member follows it. The design
and why no partition can be owned twice: docs/concepts.md, "The published sticky target".
The same page says how one leader holds after an expiry, a lost target and a stuck leader.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from .marks import Mark, barred
from .racks import Placement, arrange
from .strategies import sticky

__all__ = [
    "StickyTarget",
    "follows",
    "grace_ends",
    "leader",
    "misplaced",
    "next_target",
    "publishes",
]


@dataclass(frozen=True)
class StickyTarget:
    """A published sticky assignment: who should own which partition.

    Attributes:
        version: counts the targets published for this group and topic; each one is the last + 1.
        members: the live members it was computed for, oldest (by registration) first.
        owners: partition -> the member that should own it.
        graces: named member -> its ``rejoin_grace`` in seconds, for the members it counts that
            asked for one (copied from their registrations, so that any later leader knows it).
        absent: named member -> until when (Unix milliseconds) its partitions wait for it: a
            member in its grace, gone from the registrations but still counted in ``members``.
        barred: member -> the partitions it was left out of because it marked them unreadable
            while another member could read them (see `aio_cluster.assign.marks`): a change of
            the marks makes a target that no longer fits.
    """

    version: int
    members: tuple[str, ...]
    owners: dict[int, str]
    graces: dict[str, float] = field(default_factory=dict)
    absent: dict[str, int] = field(default_factory=dict)
    barred: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def present(self) -> tuple[str, ...]:
        """The members counted that were registered when it was computed (not in their grace)."""
        return tuple(member for member in self.members if member not in self.absent)

    def partitions_of(self, member: str) -> list[int]:
        """The sorted partitions the target gives ``member``."""
        return sorted(p for p, owner in self.owners.items() if owner == member)


def leader(members: Sequence[str]) -> str | None:
    """The member that publishes targets: the oldest, given ``members`` oldest first."""
    return members[0] if members else None


def follows(published: StickyTarget | None, members: Sequence[str]) -> bool:
    """Whether the published target was computed for exactly these live members (oldest first);
    members it keeps in their grace do not count."""
    return published is not None and published.present == tuple(dict.fromkeys(members))


def publishes(member: str, members: Sequence[str], waited: float, takeover_after: float) -> bool:
    """Whether ``member`` publishes the next target now.

    The leader always does; the k-th oldest once the published target has not followed the
    registrations for ``k * takeover_after`` seconds (a stuck leader, then a stuck next oldest...).

    Args:
        member: the member asking.
        members: the live members, oldest first.
        waited: seconds since ``member`` first saw the published target not fit ``members``.
        takeover_after: the group's ``rebalance_timeout``.
    """
    if member not in members:
        return False
    return waited >= members.index(member) * takeover_after


def next_target(
    published: StickyTarget | None,
    partitions: Collection[int],
    members: Sequence[str],
    owned: Mapping[int, str] | None = None,
    *,
    graces: Mapping[str, float] | None = None,
    now_ms: int = 0,
    loads: Mapping[str, int] | None = None,
    marks: Mapping[str, Mark] | None = None,
    topic: str = "",
    racks: Placement | None = None,
) -> StickyTarget | None:
    """The target to publish next, or None when the published one already fits.

    The published target fits when it was computed for the same members and covers exactly the
    same partitions; otherwise the next version is the `sticky()` assignment from the published
    owners. None is also returned for no partitions at all while the published target has some:
    an empty answer from Kafka is a blip, never a reason to release everything.

    A named member with a grace that is gone from ``members`` stays counted, with its partitions,
    until its grace has passed since the target first found it gone (``absent``): nothing moves
    when it leaves, and nothing when it comes back under the same name. Meanwhile it is given
    nothing more (another leaver's partitions, new ones): those go to the members present. Once
    the grace passed, its partitions are spread as any leaver's.

    Args:
        published: the target in ZooKeeper now, or None when none is there (or none readable).
        partitions: the topic's partition ids.
        members: the live members of this topic and strategy, oldest first.
        owned: with no published target, who owns each partition now (its claim node), so that
            a lost target is republished moving nothing.
        graces: live member -> its ``rejoin_grace`` in seconds, for those that have one.
        now_ms: the time now, in Unix milliseconds: when a grace begins and whether it ended
            (needed only where a member has a grace).
        loads: member -> the partitions it holds of the group's other topics, so that the
            members' totals balance too (see `sticky()`).
        marks: member -> what it marked unreadable (see `aio_cluster.assign.marks`): a member
            is left out of the partitions of ``topic`` it cannot read while another can.
        topic: the topic the target is of (its partitions are looked up in ``marks``).
        racks: the members' racks and the partitions' replicas' racks (see
            `aio_cluster.assign.racks`): the published target no longer fits when the same
            shares could put more partitions in their replicas' racks (a reassignment of
            replicas, a member given a rack); otherwise racks cost no new target.
    """
    live = tuple(dict.fromkeys(members))
    wanted = set(partitions)
    if published is not None and not wanted and published.owners:
        return None
    kept: dict[str, int] = {}
    granted = {member: grace for member, grace in (graces or {}).items() if member in live}
    ordered = live
    if published is not None:
        kept = _waiting(published, live, now_ms)
        granted.update((member, published.graces[member]) for member in kept)
        ordered += tuple(member for member in published.members if member in kept)
    bars = {
        member: tuple(sorted(ps & wanted))
        for member, ps in barred(topic, marks or {}, live, now_ms).items()
        if ps & wanted
    }
    if (
        published is not None
        and published.members == ordered
        and set(published.owners) == wanted
        and set(published.owners.values()) <= set(ordered)
        and published.absent == kept
        and published.graces == granted
        and published.barred == bars
        and (bool(bars) or not misplaced(published, racks))
    ):
        return None
    previous = dict(owned or {}) if published is None else published.owners
    assigned = sticky(wanted, ordered, previous, loads, away=kept, barred=bars, racks=racks)
    owners = {p: member for member, ps in assigned.items() for p in ps}
    version = 0 if published is None else published.version + 1
    return StickyTarget(
        version=version,
        members=ordered,
        owners=owners,
        graces=granted,
        absent=kept,
        barred=bars,
    )


def misplaced(published: StickyTarget, racks: Placement | None) -> bool:
    """Whether ``published`` leaves partitions outside their replicas' racks that its own
    shares could place in them (see `aio_cluster.assign.racks`): then a new target moves
    them, and only then does a change of the racks call for one."""
    if racks is None or not racks.applies(published.members):
        return False
    held: dict[str, list[int]] = {member: [] for member in published.members}
    for partition, owner in sorted(published.owners.items()):
        held[owner].append(partition)
    if not racks.optimised(held, ()):
        return False
    quota = {member: len(ps) for member, ps in held.items()}
    away = set(published.absent)
    if away >= set(published.members):
        away = set()
    return arrange(held, (), quota, published.members, racks, away) != held


def _waiting(published: StickyTarget, live: tuple[str, ...], now_ms: int) -> dict[str, int]:
    """The members of ``published`` gone from ``live`` whose grace has not passed, each with
    the end of its grace (kept from ``published``, or starting now for a member just gone)."""
    waiting = {}
    for member in published.members:
        grace = published.graces.get(member)
        if member in live or not grace:
            continue
        until = published.absent.get(member, now_ms + int(grace * 1000))
        if until > now_ms:
            waiting[member] = until
    return waiting


def grace_ends(target: StickyTarget) -> int | None:
    """The earliest end of a grace in ``target`` (Unix milliseconds), or None: when its
    publisher looks again."""
    return min(target.absent.values(), default=None)
