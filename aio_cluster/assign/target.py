"""The published sticky target: who computes it, who follows it, and why that cannot race. Pure.

The oldest member computes the next target and publishes it; every member follows it. The design
and why no partition can be owned twice: docs/concepts.md, "The published sticky target".
The same page says how one leader holds after an expiry, a lost target and a stuck leader.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from .strategies import sticky

__all__ = ["StickyTarget", "follows", "leader", "next_target", "publishes"]


@dataclass(frozen=True)
class StickyTarget:
    """A published sticky assignment: who should own which partition.

    Attributes:
        version: counts the targets published for this group and topic; each one is the last + 1.
        members: the live members it was computed for, oldest (by registration) first.
        owners: partition -> the member that should own it.
    """

    version: int
    members: tuple[str, ...]
    owners: dict[int, str]

    def partitions_of(self, member: str) -> list[int]:
        """The sorted partitions the target gives ``member``."""
        return sorted(p for p, owner in self.owners.items() if owner == member)


def leader(members: Sequence[str]) -> str | None:
    """The member that publishes targets: the oldest, given ``members`` oldest first."""
    return members[0] if members else None


def follows(published: StickyTarget | None, members: Sequence[str]) -> bool:
    """Whether the published target was computed for exactly these members (oldest first)."""
    return published is not None and published.members == tuple(dict.fromkeys(members))


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
) -> StickyTarget | None:
    """The target to publish next, or None when the published one already fits.

    The published target fits when it was computed for the same members and covers exactly the
    same partitions; otherwise the next version is the `sticky()` assignment from the published
    owners. None is also returned for no partitions at all while the published target has some:
    an empty answer from Kafka is a blip, never a reason to release everything.

    Args:
        published: the target in ZooKeeper now, or None when none is there (or none readable).
        partitions: the topic's partition ids.
        members: the live members of this topic and strategy, oldest first.
        owned: with no published target, who owns each partition now (its claim node), so that
            a lost target is republished moving nothing.
    """
    ordered = tuple(dict.fromkeys(members))
    wanted = set(partitions)
    if published is not None and not wanted and published.owners:
        return None
    if (
        published is not None
        and published.members == ordered
        and set(published.owners) == wanted
        and set(published.owners.values()) <= set(ordered)
    ):
        return None
    previous = dict(owned or {}) if published is None else published.owners
    assigned = sticky(wanted, ordered, previous)
    owners = {p: member for member, ps in assigned.items() for p in ps}
    version = 0 if published is None else published.version + 1
    return StickyTarget(version=version, members=ordered, owners=owners)
