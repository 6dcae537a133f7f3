"""The published sticky target: who computes it, who follows it, and why that cannot race. Pure.

The oldest member computes the next target and publishes it; every member follows it. The design
and why no partition can be owned twice: docs/concepts.md, "The published sticky target".
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from .strategies import sticky

__all__ = ["StickyTarget", "leader", "next_target"]


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


def next_target(
    published: StickyTarget | None, partitions: Collection[int], members: Sequence[str]
) -> StickyTarget | None:
    """The target to publish next, or None when the published one already fits.

    The published target fits when it was computed for the same members and covers exactly the
    same partitions; otherwise the next version is the `sticky()` assignment
    from the published owners.

    Args:
        published: the target in ZooKeeper now, or None when none was published yet.
        partitions: the topic's partition ids.
        members: the live members of this topic and strategy, oldest first.
    """
    ordered = tuple(dict.fromkeys(members))
    wanted = set(partitions)
    if (
        published is not None
        and published.members == ordered
        and set(published.owners) == wanted
        and set(published.owners.values()) <= set(ordered)
    ):
        return None
    previous = {} if published is None else published.owners
    assigned = sticky(wanted, ordered, previous)
    owners = {p: member for member, ps in assigned.items() for p in ps}
    version = 0 if published is None else published.version + 1
    return StickyTarget(version=version, members=ordered, owners=owners)
