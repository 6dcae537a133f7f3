"""The sticky target published by share: what each member reads, and who watches what. Pure.

The leader publishes, beside the whole target, one node per member counted: that member's
*share* (its partitions, and whether it is the deputy that watches the registrations with the
leader). A member that neither leads nor deputizes watches only its own share and the
registration of its predecessor, so a change wakes the members whose share it changes, not the
group. The design, and how a group of older members upgrades one by one: docs/concepts.md,
"The published sticky target".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .target import StickyTarget

__all__ = [
    "SHARES_PROTOCOL",
    "Share",
    "ShareChanges",
    "predecessor",
    "share_changes",
    "shares_of",
    "watches_registrations",
]

SHARES_PROTOCOL = 2
"""The group protocol of members that follow their share (written in their registration). A
registration without one is of protocol 1: that member watches the registrations and reads the
whole target at every change, as every member did before."""


@dataclass(frozen=True)
class Share:
    """One member's part of a published target.

    Attributes:
        partitions: the partitions the target gives the member, sorted.
        deputy: the member is the second oldest the target counts (present): it watches the
            registrations too, to publish in a stuck leader's place and to lead at once when
            the leader goes.
        of: how many partitions the target covers, numbered 0 to ``of - 1`` as Kafka numbers a
            topic's: a member that follows its share knows the topic's partitions from it. A
            topic that grows changes every share, so every member hears of it.
    """

    partitions: tuple[int, ...]
    deputy: bool = False
    of: int = 0


@dataclass(frozen=True)
class ShareChanges:
    """What the share nodes need so that they say what a new target does.

    Attributes:
        created: member -> its share, for members the previous target did not count.
        changed: member -> its new share, for members whose share changed.
        deleted: the members the new target no longer counts, sorted.
    """

    created: dict[str, Share]
    changed: dict[str, Share]
    deleted: list[str]


def shares_of(target: StickyTarget) -> dict[str, Share]:
    """Every counted member's share of ``target`` (one pass over the partitions)."""
    lists: dict[str, list[int]] = {member: [] for member in target.members}
    for partition, owner in target.owners.items():
        lists.setdefault(owner, []).append(partition)
    present = target.present
    deputy = present[1] if len(present) > 1 else None
    of = len(target.owners)
    return {
        member: Share(tuple(sorted(partitions)), member == deputy, of)
        for member, partitions in lists.items()
    }


def share_changes(before: Mapping[str, Share | None], after: Mapping[str, Share]) -> ShareChanges:
    """The writes that turn the share nodes of ``before`` into those of ``after`` (a share of
    ``before`` whose content is not known, None, is written again)."""
    return ShareChanges(
        created={m: s for m, s in after.items() if m not in before},
        changed={m: s for m, s in after.items() if m in before and before[m] != s},
        deleted=sorted(set(before) - set(after)),
    )


def watches_registrations(
    member: str,
    ordered: Sequence[str],
    protocols: Mapping[str, int],
    readers: Sequence[Sequence[str]],
) -> bool:
    """Whether ``member`` watches the registrations and follows whole targets (the way of
    protocol 1), rather than its share and its predecessor.

    It does when it leads or deputizes (first or second among the readers of a topic it reads),
    and when any member registered before it is of an older protocol: that member may come to
    lead, and it publishes no share. Members only ever leave from before a member (a newcomer
    is the youngest), so a member that follows its share never meets an older leader.

    Args:
        member: the member asking.
        ordered: every live member of the group, oldest first.
        protocols: member -> the protocol its registration names.
        readers: for each topic ``member`` reads, the members that read it, oldest first.
    """
    older = ordered[: ordered.index(member)] if member in ordered else ordered
    if any(protocols.get(m, 1) < SHARES_PROTOCOL for m in older):
        return True
    return any(member in topic[:2] for topic in readers)


def predecessor(member: str, readers: Sequence[str]) -> str | None:
    """The reader of a topic registered just before ``member`` (None for the oldest): its
    registration is the one ``member`` watches, as in ZooKeeper's leader-election recipe."""
    if member not in readers:
        return None
    index = readers.index(member)
    return readers[index - 1] if index else None
