"""The rebalance: whenever asked, under one lock, this member works out the partitions the
assignment gives it, releases the others and claims the new ones in ZooKeeper.

Each topic is assigned on its own, among the members whose subscriptions read it, oldest first:
with the sticky strategy each topic has its own published target and its own leader (the oldest
member reading it), so joins and leaves move the fewest partitions per topic; a many-topic member
computes the targets it leads in turns (`_Turns`), so that the members' totals balance. A sticky
member that neither leads nor deputizes any of its topics follows its shares instead: it reads
no registration and no whole target, and wakes when its share changes or its predecessor goes
(`aio_cluster.assign.shares`).
Partitions are known by key (`aio_cluster.kafka.topics.TopicKeys`; a one-topic member's keys are
its partition ids).

It asks `aio_cluster.member.registration` who the members are, and `aio_cluster.member.topics`
which topics and partitions are read; neither knows this part. What happens to a partition's
batches and offsets around a handover is not its business: it asks the `Handover` to drain what it
releases and to start what it claimed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..assign.shares import predecessor, watches_registrations
from ..assign.strategies import Strategy, assign
from ..assign.target import StickyTarget
from ..errors import (
    AioClusterError,
    BrokerError,
    ConfigurationError,
    CoordinationError,
    CorruptOffsetError,
    MemberReplacedError,
    SessionLostError,
    StrategyMismatchError,
)
from ..kafka.topics import PartitionKey
from ..zookeeper.client import SessionState, ZooKeeper
from .claiming import ClaimNodes
from .claims import UNPOSITIONED, Claim
from .handover import Handover
from .keyed_layout import KeyedLayout
from .offsets import Offsets
from .partitions import PartitionStates
from .registration import RETRY_DELAY, Members, Registrar
from .topics import Topics, TopicState

if TYPE_CHECKING:
    from ..otel.telemetry import Rebalance, Telemetry

__all__ = ["Rebalancer"]

log = logging.getLogger(__name__)


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


class Rebalancer:
    """One member's rebalances, and the claims they make and release."""

    def __init__(
        self,
        zk: ZooKeeper,
        layout: KeyedLayout,
        registration: Registrar,
        topics: Topics,
        offsets: Offsets,
        states: PartitionStates,
        *,
        member_id: str,
        strategy: Strategy,
        claim_timeout: float,
        named: bool,
        telemetry: Telemetry | None = None,
    ) -> None:
        """Args:
        zk: the member's ZooKeeper client.
        layout: the group's paths, by partition key.
        registration: asked who the members are (and registers this one).
        topics: asked which topics and partitions this member reads.
        offsets: read for the start of each new claim.
        states: the member's partition states: told of each claim made, released or lost.
        member_id: this member's id.
        strategy: the assignment strategy.
        claim_timeout: seconds to wait for a partition's previous owner to release it.
        named: a named member takes over the owner nodes of its older run (see `ClaimNodes`).
        telemetry: runs each rebalance in a span, its steps in spans of their own, if given.
        """
        self._zk = zk
        self._layout = layout
        self._keys = layout.keys
        self._registration = registration
        self._topics = topics
        self._offsets = offsets
        self._states = states
        self._claims: Mapping[PartitionKey, Claim] = states.claims
        self._id = member_id
        self._strategy = strategy
        self._claim_timeout = claim_timeout
        self._nodes = ClaimNodes(zk, layout, member_id, takes_over=named)
        self.rebalances = 0
        """Rebalances that finished (a claim may have timed out in them)."""
        self.last_rebalance: float | None = None
        """How long the last finished rebalance took, in seconds."""
        self.recent_rebalances: collections.deque[float] = collections.deque(maxlen=100)
        """How long the last (at most 100) finished rebalances took, oldest first (metrics)."""
        self._epoch = 0
        """Counts session losses: a rebalance that began before one must not record claims."""
        self._in_target = False
        """Whether the assignment followed counts this member (a sticky newcomer's first
        rebalance may still see the target of the members before it): joining ends then."""
        self._follows_shares = strategy is Strategy.STICKY
        """Whether this member follows its shares (see the module): it then reads the
        registrations without a watch, and only when they may be stale. A newcomer starts so,
        and watches them from its first rebalance on when it leads or deputizes."""
        self._deputy = False
        """Whether a share read last named this member the deputy: it watches the
        registrations from its next rebalance on."""
        self.lock = asyncio.Lock()
        """Held by a rebalance: one runs at a time, so claims and releases never interleave."""
        self._requested = asyncio.Event()
        self._telemetry = telemetry

    def _step(self, name: str) -> contextlib.AbstractContextManager[object]:
        """The span of one step of the rebalance, if traced."""
        return contextlib.nullcontext() if self._telemetry is None else self._telemetry.step(name)

    @property
    def claim_timeouts(self) -> int:
        """Claims not made within ``claim_timeout``."""
        return self._nodes.timeouts

    @property
    def unowned_nodes(self) -> int:
        """Claims given up on an owner node that no registered member's session holds."""
        return self._nodes.unowned

    def request(self) -> None:
        """Rebalance again soon (a member came or went, the topic changed, the session is back)."""
        self._requested.set()

    async def run(
        self,
        joined: asyncio.Future[None],
        handover: Handover,
        fail: Callable[[AioClusterError], None],
    ) -> None:
        """Rebalance whenever asked, until cancelled; ``joined`` is settled by the first one.

        An error that no retry can mend (a corrupted offset, the name taken over) ends the loop:
        before joining it settles ``joined``, after joining it goes to ``fail``.
        """
        retry: float | None = 0.0
        loop = asyncio.get_running_loop()
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._requested.wait(), retry)
            self._requested.clear()
            await handover.report_lost()
            if self._zk.state is not SessionState.CONNECTED:
                retry = None
                continue
            started = loop.time()
            traced: contextlib.AbstractContextManager[Rebalance | None] = (
                contextlib.nullcontext() if self._telemetry is None else self._telemetry.rebalance()
            )
            try:
                with traced as span:
                    async with self.lock:
                        complete = await self._rebalance(handover, span)
                self.rebalances += 1
                self.last_rebalance = loop.time() - started
                self.recent_rebalances.append(self.last_rebalance)
            except (CorruptOffsetError, MemberReplacedError) as exc:
                log.error("member %s: %s", self._id, exc)
                await handover.report_lost()
                if not joined.done():
                    joined.set_exception(exc)
                else:
                    fail(exc)
                return
            except (StrategyMismatchError, ConfigurationError) as exc:
                if not joined.done():
                    joined.set_exception(exc)
                    return
                log.error("member %s: rebalance refused: %s", self._id, exc)
                complete = False
            except (CoordinationError, BrokerError) as exc:
                log.warning("member %s: rebalance failed, retrying: %s", self._id, exc)
                complete = False
            retry = None if complete else RETRY_DELAY
            if not joined.done() and self._in_target:
                joined.set_result(None)

    async def _rebalance(self, handover: Handover, span: Rebalance | None = None) -> bool:
        """Release what the assignment no longer gives this member, then claim what it does;
        ``span``, if given, hears what moved.

        Returns:
            False when a claim could not be made in time, so the rebalance is tried again.
        """
        epoch = self._epoch
        with self._step("targets"):
            target = await self._target()
        self._states.expected(target)
        fenced = self._states.fenced
        if fenced:
            log.warning(
                "member %s: claims of partitions %s are gone; dropping them",
                self._id,
                self._layout.labels(fenced),
            )
        leaving = sorted((set(self._claims) - target) | set(fenced))
        kept: list[PartitionKey] = []
        if leaving:
            try:
                with self._step("revoke"):
                    kept = await handover.revoke(leaving)
                leaving = [p for p in leaving if p not in kept]
                with self._step("release"):
                    await asyncio.gather(*(self._release_node(p) for p in leaving))
            finally:
                handover.released(leaving)
        before = set(self._claims)
        with self._step("claim"):
            complete = await self._claim_all(sorted(target - before), epoch)
        if span is not None:
            span.moved(leaving, sorted(set(self._claims) - before), kept)
        # A partition kept while its handler ignores cancellation is released by a later try.
        complete = complete and not kept
        with self._step("assign"):
            changed = await handover.assigned()
        if changed:
            log.info(
                "member %s owns %s of %s",
                self._id,
                self._layout.labels(sorted(self._claims)),
                self._layout.labels(self._topics.partitions),
            )
        await self._nodes.reconcile(self._claims)
        await self._topics.retire()
        return complete

    async def _target(self) -> set[PartitionKey]:
        """The keys of every partition the assignment gives this member now, over the topics
        it reads (and whether the assignment counts this member, in ``_in_target``)."""
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
            found = await asyncio.gather(*(self._share_of_topic(s) for s in states))
            await self._registration.watch_predecessors(
                {p for s in states if (p := predecessor(self._id, readers[s.name]))},
                self.request,
            )
        else:
            found = await self._targets(members, states, readers)
        target: set[PartitionKey] = set()
        self._in_target = True
        for keys, counted in found:
            target |= keys
            self._in_target = self._in_target and counted
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
        return await asyncio.gather(
            *(self._target_of_topic(s, readers[s.name], graces, turns) for s in states)
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
        turns: _Turns | None = None,
    ) -> tuple[set[PartitionKey], bool]:
        """The keys of the partitions of one topic this member should own, and whether the
        assignment followed counts this member; ``members`` (reading the topic) oldest first,
        ``graces`` the named members' (see `TargetNode.follow`). ``turns`` orders the targets
        this member computes (a many-topic member)."""
        try:
            return await self._follow_topic(state, members, graces, turns)
        finally:
            if turns is not None:
                turns.of(state.name).decided(None)

    async def _follow_topic(
        self,
        state: TopicState,
        members: list[str],
        graces: Mapping[str, float],
        turns: _Turns | None,
    ) -> tuple[set[PartitionKey], bool]:
        state.leading = members[:1] == [self._id]
        # A sticky follower takes the partitions from the published target. The leader asks Kafka
        # only while it knows none: a change of the members does not change the partitions, and
        # `check_partitions` brings it news of those, so a join or a leave waits on no metadata
        # request (with 10,000 partitions, each costs a tenth of a second of CPU or more). Every
        # member of the other strategies asks at each rebalance, so that all agree.
        if self._strategy is not Strategy.STICKY or (state.leading and not state.partitions):
            await self._topics.refresh(state)
        owned_here = {k for k in self._claims if self._keys.topic(k) == state.name}
        if self._strategy is not Strategy.STICKY:
            mine = assign(self._strategy, state.partitions, members).get(self._id, [])
            return set(self._keys.keys(state.name, mine)), True
        target = await state.target.follow(
            members,
            state.partitions,
            self.request,
            graces,
            None if turns is None else turns.of(state.name),
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

    async def _release_node(self, partition: PartitionKey) -> None:
        claim = self._states.released(partition)
        if claim is not None:
            await self._nodes.release(partition, claim.node_version, claim.epoch)

    async def _claim_all(self, partitions: list[PartitionKey], epoch: int) -> bool:
        """Claim partitions concurrently; False when any could not be claimed in time."""
        results = await asyncio.gather(
            *(self._claim(partition, epoch) for partition in partitions), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return all(results)

    async def _claim(self, partition: PartitionKey, epoch: int) -> bool:
        """Claim a partition and learn its stored offset. False when its previous owner did not
        release it in time, or a newer rebalance was asked for meanwhile; the claim is then left
        to the next rebalance."""
        taken = await self._nodes.take(partition, self._claim_timeout, self._requested)
        if taken is None:
            return False
        try:
            stored = await self._offsets.stored(partition)
        except BaseException:
            # No claim records the node: give it back at once, or it would block the partition
            # for this session's life once the assignment moves it elsewhere.
            await self._nodes.unrecorded(partition, taken.node_version, taken.epoch)
            raise
        if self._epoch != epoch:
            # Checked after the last wait: a claim of a lost session must never be recorded.
            raise SessionLostError("the ZooKeeper session expired during the rebalance")
        self._states.claimed(
            Claim(
                partition=partition,
                node_version=taken.node_version,
                next_offset=UNPOSITIONED if stored is None else stored,
                stored=stored,
                epoch=taken.epoch,
            )
        )
        return True

    async def leave(self, handover: Handover) -> None:
        """Give up every claim (the listener hears of them, their pending offsets are stored),
        release them and delete the registration."""
        async with self.lock:
            await handover.give_up(sorted(self._claims))
            # All at once: with many partitions, one round trip instead of one per claim.
            await asyncio.gather(*(self._release_node(p) for p in list(self._claims)))
            await self._registration.delete()

    def lose(self) -> None:
        """The session expired: every claim and the registration are gone with it. Offsets not
        yet stored are dropped, never written on the new session (the partitions may have new
        owners by now): their batches are delivered again."""
        if self._claims:
            log.warning(
                "member %s: ZooKeeper session lost; partitions %s no longer owned",
                self._id,
                self._layout.labels(sorted(self._claims)),
            )
        self._epoch += 1
        self._states.lost()
        self._registration.lost()
