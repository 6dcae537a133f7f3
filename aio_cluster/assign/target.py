"""The published sticky target: who computes it, who follows it, and why that cannot race. Pure.

A sticky assignment depends on who owned what before, so the members of a group cannot each
compute it from what they read: while claims move, two members reading the owner nodes a moment
apart see different histories and compute different targets. Instead one member computes and
everyone follows:

* **The leader is the oldest live member**, by its registration's creation zxid (the order
  ZooKeeper gave the ``ids`` nodes). Joins never change the leader (a newcomer is the youngest),
  nor do leaves of other members; the oldest has also shown the longest that its session holds.
* **The leader publishes one versioned node**, ``/consumers/<group>/assignment/<topic>``
  (`GroupLayout.assignment`): the target's version, the members it was computed
  for (oldest first) and partition -> member. It computes the next target from the published one
  (`next_target()`) whenever the registrations or the topic's partitions change, and writes it
  with a conditional set on the node's version: if two members both believe they lead for a
  moment (the old leader's session expired but it has not heard yet), only one write of each
  version wins and the loser rereads, so the published targets form one history.
* **Every member watches that node** and moves toward it: it releases, at a batch
  boundary and after storing the offset, each partition the target gives to another, and claims
  each partition the target gives to it. Partitions whose owner does not change are not touched,
  so they keep delivering through the rebalance.
* **Takeover**: every member watches the registrations (as the classic consumer did), so when
  the leader dies the next oldest finds itself oldest (`leader()`) and goes on from the
  published target: the dead leader's partitions are spread as any leaver's, the rest stay put.
  No election round is needed: the registrations' creation order already is the succession.

* **A member back from an expiry is the youngest.** Its registration is a new node with a new
  creation zxid, so it ranks after every member that stayed. Each member keeps the registrations
  it read, but reads them all again whenever the ``ids`` node's child version moved by more than
  the names that came and went show (a registration deleted and made again under the same id
  between two reads), its own included: so no two members both believe they are the oldest for
  longer than one read, and the leader's conditional write already settles that moment.
* **A lost target moves nothing.** When the node is missing or holds no readable target, the
  leader publishes the next one from the *current owners* (it reads the claim nodes) instead of
  from no history, and a follower keeps what it owns until a target is published. A target with
  no partitions is never published over one that has some (Kafka answering "unknown topic" for a
  moment during a broker's restart must not make the group release everything).
* **A stuck leader cannot freeze the group.** A leader whose event loop is blocked keeps its
  session (kazoo's threads answer the pings), so the others cannot tell it from a healthy one by
  the session. What they can see is the target not following the registrations: the k-th oldest
  member (k = 1 for the next oldest) publishes the next target itself once the registrations
  have differed from the published target's members for k x ``rebalance_timeout`` (each member
  sets a timer when it sees the difference). It computes the target exactly as the leader would,
  from the published one, and writes it conditionally; when the leader wakes, the target fits the
  registrations and it writes nothing, so there is no second writer in a steady group. Only
  registration changes are taken over: the topic's partitions are asked from Kafka by the leader
  alone, and a member that is not the leader keeps the published partitions.

**No partition is ever owned twice, by construction.** Ownership is the classic ephemeral claim
node ``owners/<topic>/<partition>``, created exclusively; a member whose target says "claim p"
while the old owner has not released it yet waits for the node to go (a watch), it never takes
it over. Members that transiently follow different targets (one has seen version 7, another still
acts on 6) therefore only delay each other's claims; the target decides who *should* own a
partition, the claim node who *does*. A member that dies loses its claims with its session.

**ZooKeeper load per rebalance** stays with what moves: on a change each member lists the
registration names (one request) and reads the data of new registrations only (it keeps the
others'), and reads the target node; the leader writes it once. No member reads the owner nodes
but a leader that finds no readable target: each moved partition costs its release (its offset,
in one transaction per rebalance, and a delete) and its claim (a create and an offset read).
Followers rebalance twice per change (once for the registrations, once for the new target), a few
requests each.

The classic ``ids``, ``owners`` and ``offsets`` nodes are kept exactly as before, so existing
tools still read the group; the target node is one more node beside them that they ignore.
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
