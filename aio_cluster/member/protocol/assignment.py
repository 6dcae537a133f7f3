"""Assignment: which partitions the assignment gives one member now, over the topics it reads.

Each topic is assigned on its own, among the members whose subscriptions read it, oldest first:
with the sticky strategy each topic has its own published target and its own leader (the oldest
member reading it), so joins and leaves move the fewest partitions per topic; a many-topic member
computes the targets it leads in turns (`_Turns`), so that the members' totals balance. A sticky
member that neither leads nor deputizes any of its topics follows its shares instead: it reads
no registration and no whole target, and wakes when its share changes or its predecessor goes
(`aio_cluster.assign.shares`). With range and round-robin every member computes the same
assignment (`aio_cluster.assign.strategies`).

It only reads: the rebalance (`aio_cluster.member.protocol.rebalance`) releases and claims what this
finds.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ...assign.marks import Mark, barred, settles_at
from ...assign.racks import Placement
from ...assign.shares import predecessor, watches_registrations
from ...assign.strategies import Strategy, assign
from ...assign.target import StickyTarget
from ...concurrency import gather
from ...kafka.topics import PartitionKey, TopicKeys
from ..delivery.claims import Claim
from .marks import MarkReader
from .registration import Members, Registrar
from .topics import Topics, TopicState

__all__ = ["Assignment"]


class _Turns:
    """The order in which a many-topic member decides the targets of the topics it leads.

    Their reads and writes run at once, but each target is computed after the one before it was
    decided, against what every other topic gives each member (`sticky()`'s loads): so the
    members' totals balance, and the result does not depend on which request returned first.
    """

    def __init__(self, topics: Mapping[str, TopicState], led: list[str]) -> None:
        self._topics = topics
        self._order = led
        loop = asyncio.get_running_loop()
        self._done = {name: loop.create_future() for name in led}

    def of(self, topic: str) -> _TopicTurn:
        """The turn of ``topic`` (one this member leads or not)."""
        return _TopicTurn(self, topic)

    async def loads(self, topic: str) -> collections.Counter[str]:
        if topic in self._done:
            index = self._order.index(topic)
            if index:
                await self._done[self._order[index - 1]]
        loads: collections.Counter[str] = collections.Counter()
        for name, state in self._topics.items():
            if name != topic:
                loads.update(state.counts)
        return loads

    def decided(self, topic: str, target: StickyTarget | None) -> None:
        if target is not None:
            self._topics[topic].counts = collections.Counter(target.owners.values())
        done = self._done.get(topic)
        if done is not None and not done.done():
            done.set_result(None)


@dataclass(frozen=True)
class _TopicTurn:
    """One topic's side of `_Turns`, as the target node asks for it (`Balance`)."""

    turns: _Turns
    topic: str

    async def loads(self) -> Mapping[str, int]:
        return await self.turns.loads(self.topic)

    def decided(self, target: StickyTarget | None) -> None:
        self.turns.decided(self.topic, target)


class Assignment:
    """What the assignment gives one member now (see the module)."""

    def __init__(
        self,
        registration: Registrar,
        topics: Topics,
        claims: Mapping[PartitionKey, Claim],
        keys: TopicKeys,
        *,
        member_id: str,
        strategy: Strategy,
        request: Callable[[], None],
        marks: MarkReader,
    ) -> None:
        """Args:
        registration: asked who the members are (and registers this one).
        topics: asked which topics and partitions this member reads.
        claims: the member's claims (read only): kept while no target is published.
        keys: the member's topic numbers.
        member_id: this member's id.
        strategy: the assignment strategy.
        request: asks for a rebalance (a watch fired, a deputy was named).
        marks: the group's marks, read by the members that compute an assignment (a mark
            leaves a member out of the partitions it cannot read; see
            `aio_cluster.assign.marks`).
        """
        self._registration = registration
        self._topics = topics
        self._keys = keys
        self._claims = claims
        self._id = member_id
        self._strategy = strategy
        self.request = request
        self._marks = marks
        self.in_target = False
        """Whether the assignment followed counts this member (a sticky newcomer's first
        rebalance may still see the target of the members before it): joining ends then."""
        self._follows_shares = strategy is Strategy.STICKY
        """Whether this member follows its shares (see the module): it then reads the
        registrations without a watch, and only when they may be stale. A newcomer starts so,
        and watches them from its first rebalance on when it leads or deputizes."""
        self._deputy = False
        """Whether a share read last named this member the deputy: it watches the
        registrations from its next rebalance on."""

    async def target(self) -> set[PartitionKey]:
        """The keys of every partition the assignment gives this member now, over the topics
        it reads (and whether the assignment counts this member, in `in_target`)."""
        watching = not self._follows_shares
        members = await self._registration.check_in(self.request if watching else None)
        states = await self._topics.current()
        readers = self._readers(members, states)
        if self._strategy is Strategy.STICKY:
            self._follows_shares = not self._deputy and not watches_registrations(
                self._id,
                [m for m, _ in sorted(members.items(), key=lambda item: item[1][1])],
                {member: info.protocol for member, (info, _czxid) in members.items()},
                [readers[s.name] for s in states],
            )
            self._deputy = False
            if not self._follows_shares and not watching:
                # It leads or deputizes now: read them again, watching from now on.
                members = await self._registration.check_in(self.request)
                readers = self._readers(members, states)
        if self._follows_shares:
            found = await gather(functools.partial(self._share_of_topic, s) for s in states)
            await self._registration.watch_predecessors(
                {p for s in states if (p := predecessor(self._id, readers[s.name]))},
                self.request,
            )
        else:
            found = await self._targets(members, states, readers)
        target: set[PartitionKey] = set()
        self.in_target = True
        for keys, counted in found:
            target |= keys
            self.in_target = self.in_target and counted
        return target

    def _readers(self, members: Members, states: list[TopicState]) -> dict[str, list[str]]:
        """topic -> the members of this strategy that read it, oldest first."""
        ordered = [
            (member, info)
            for member, (info, _czxid) in sorted(members.items(), key=lambda item: item[1][1])
            if info.strategy == self._strategy
        ]
        return {
            state.name: [member for member, info in ordered if info.subscribes(state.name)]
            for state in states
        }

    async def _targets(
        self, members: Members, states: list[TopicState], readers: Mapping[str, list[str]]
    ) -> list[tuple[set[PartitionKey], bool]]:
        """Each topic's keys for this member and whether it is counted, from the whole targets
        (or the assignment of a strategy other than sticky)."""
        sticky = self._strategy is Strategy.STICKY
        led = [s.name for s in states if sticky and readers[s.name][:1] == [self._id]]
        read = self._topics.states
        turns = _Turns(read, led) if len(read) > 1 else None
        # Every named member's grace; a target keeps only those of the members it counts.
        graces = {
            member: info.rejoin_grace
            for member, (info, _czxid) in members.items()
            if info.rejoin_grace
        }
        racks = {member: info.rack for member, (info, _czxid) in members.items() if info.rack}
        marks = await self._marks.read(self.request)
        now_ms = int(time.time() * 1000)
        settles = settles_at(marks, now_ms)
        if settles is not None:
            # A mark bars its member once settled: look again then.
            asyncio.get_running_loop().call_later((settles - now_ms) / 1000 + 0.05, self.request)
        return await gather(
            functools.partial(
                self._target_of_topic, s, readers[s.name], graces, marks, racks, turns
            )
            for s in states
        )

    async def _share_of_topic(self, state: TopicState) -> tuple[set[PartitionKey], bool]:
        """The keys of one topic this member should own by its share, and whether the target
        counts it. With no share, it keeps what it owns (as with no target); a share that went
        may mean its registration went behind its back, so the registrations are read again."""
        state.leading = False
        share = await state.target.follow_share(self.request)
        if share is None:
            if state.shared:
                self._registration.stale()
            state.shared = False
            return {k for k in self._claims if self._keys.topic(k) == state.name}, False
        state.shared = True
        state.partitions = list(range(share.of))
        if share.deputy:
            self._deputy = True
            self.request()
        return set(self._keys.keys(state.name, share.partitions)), True

    async def _target_of_topic(
        self,
        state: TopicState,
        members: list[str],
        graces: Mapping[str, float],
        marks: Mapping[str, Mark],
        racks: Mapping[str, str],
        turns: _Turns | None = None,
    ) -> tuple[set[PartitionKey], bool]:
        """The keys of the partitions of one topic this member should own, and whether the
        assignment followed counts this member; ``members`` (reading the topic) oldest first,
        ``graces`` the named members' (see `TargetNode.follow`), ``marks`` and ``racks`` (member
        -> its rack) the group's. ``turns`` orders the targets this member computes (a
        many-topic member)."""
        try:
            return await self._follow_topic(state, members, graces, marks, racks, turns)
        finally:
            if turns is not None:
                turns.of(state.name).decided(None)

    async def _follow_topic(
        self,
        state: TopicState,
        members: list[str],
        graces: Mapping[str, float],
        marks: Mapping[str, Mark],
        racks: Mapping[str, str],
        turns: _Turns | None,
    ) -> tuple[set[PartitionKey], bool]:
        state.leading = members[:1] == [self._id]
        racked = {member: racks[member] for member in members if member in racks}
        # A sticky follower takes the partitions from the published target. The leader asks Kafka
        # only while it knows none: a change of the members does not change the partitions, and
        # `check_partitions` brings it news of those, so a join or a leave waits on no metadata
        # request (with 10,000 partitions, each costs a tenth of a second of CPU or more). Every
        # member of the other strategies asks at each rebalance, so that all agree.
        # A member that marked partitions it cannot read may not reach Kafka at all: it goes on
        # with the partitions it knows, or each of its rebalances would wait out a request
        # timeout before it releases what the others should read.
        # A leader with members in racks asks once for the replicas' racks, which a target
        # followed does not give (`check_partitions` brings news of them).
        cut_off = self._id in marks and bool(state.partitions)
        if (self._strategy is not Strategy.STICKY and not cut_off) or (
            state.leading and (not state.partitions or (racked and state.replicas is None))
        ):
            await self._topics.refresh(state)
        owned_here = {k for k in self._claims if self._keys.topic(k) == state.name}
        if self._strategy is not Strategy.STICKY:
            bars = barred(state.name, marks, members, int(time.time() * 1000))
            mine = assign(self._strategy, state.partitions, members, bars).get(self._id, [])
            return set(self._keys.keys(state.name, mine)), True
        target = await state.target.follow(
            members,
            state.partitions,
            self.request,
            graces,
            None if turns is None else turns.of(state.name),
            self._registration.roster,
            marks,
            Placement(racked, state.replicas or {}) if racked else None,
        )
        if target is None:
            # None published (or none readable) yet: keep what is owned until one is, since the
            # next one is computed from the owners.
            return owned_here, False
        state.partitions = sorted(target.owners)
        state.counts = collections.Counter(target.owners.values())
        return (
            set(self._keys.keys(state.name, target.partitions_of(self._id))),
            self._id in target.members,
        )
