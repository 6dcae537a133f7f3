"""The rebalance: whenever asked, under one lock, this member learns the partitions the
assignment gives it (`aio_cluster.member.protocol.assignment`), releases the others and claims the
new ones in ZooKeeper, under their fences (`aio_cluster.member.protocol.claiming`).
Partitions are known by key (`aio_cluster.kafka.topics.TopicKeys`; a one-topic member's keys are
its partition ids).

Which partitions are this member's is not its business, nor what happens to a partition's
batches and offsets around a handover: it asks the `Handover` to drain what it releases and to
start what it claimed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Protocol

import anyio

from ...assign.strategies import Strategy
from ...concurrency import settle
from ...errors import (
    AioClusterError,
    BrokerError,
    ConfigurationError,
    CoordinationError,
    CorruptOffsetError,
    MemberReplacedError,
    SessionLostError,
    StrategyMismatchError,
)
from ...kafka.topics import PartitionKey
from ...zookeeper.client import ZooKeeper
from ...zookeeper.values import SessionState
from ..delivery.claims import UNPOSITIONED, Claim
from ..delivery.partitions import PartitionStates
from .assignment import Assignment
from .claiming import ClaimNodes, Taken
from .handover import Handover
from .keyed_layout import KeyedLayout
from .marks import MarkReader
from .offsets import Offsets
from .registration import RETRY_DELAY, Registrar
from .topics import Topics

if TYPE_CHECKING:
    from ...otel.telemetry import Rebalance, Telemetry

__all__ = ["ClaimStarter", "Rebalancer"]

log = logging.getLogger(__name__)


class ClaimStarter(Protocol):
    """What a claim starts and ends beside its owner node (the exactly-once mode's producer of
    the partition: `aio_cluster.member.exactly_once.Transactions`)."""

    async def claim(self, partition: PartitionKey, stored: int | None) -> int | None:
        """The claim of ``partition`` is being taken (its node is ours, ZooKeeper stores
        ``stored``): start what goes with it; returns where the claim starts.

        Raises:
            BrokerError: it could not start (the claim is not made; the rebalance retries).
        """

    async def release(self, partition: PartitionKey) -> None:
        """The claim of ``partition`` ends (before its node is deleted)."""

    async def retire(self, claimed: Collection[PartitionKey]) -> None:
        """Before a rebalance: end what goes with claims no longer held (lost with a session)."""


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
        starter: ClaimStarter | None = None,
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
        starter: started with each claim, before it is recorded, and ended with it, if given.
        """
        self._starter = starter
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
        self._assignment = Assignment(
            registration,
            topics,
            self._claims,
            self._keys,
            member_id=member_id,
            strategy=strategy,
            request=self.request,
            marks=MarkReader(zk, layout.marks, member_id=member_id),
        )
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
            with anyio.move_on_after(retry):
                await self._requested.wait()
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
            if not joined.done() and self._assignment.in_target:
                joined.set_result(None)

    async def _rebalance(self, handover: Handover, span: Rebalance | None = None) -> bool:
        """Release what the assignment no longer gives this member, then claim what it does;
        ``span``, if given, hears what moved.

        Returns:
            False when a claim could not be made in time, so the rebalance is tried again.
        """
        epoch = self._epoch
        if self._starter is not None:
            await self._starter.retire(list(self._claims))
        with self._step("targets"):
            target = await self._assignment.target()
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
                    await self._release_all(leaving)
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
        if changed and log.isEnabledFor(logging.INFO):
            # Counted, not listed: every member would format the whole topic at each change
            # (10,000 partitions cost each member about 10 ms of CPU, and a line as long).
            log.info(
                "member %s owns %s (%d of %d partitions)",
                self._id,
                self._layout.labels(sorted(self._claims)),
                len(self._claims),
                len(self._topics.partitions),
            )
        await self._nodes.reconcile(self._claims)
        await self._topics.retire()
        return complete

    async def _release_all(self, partitions: list[PartitionKey]) -> None:
        """Release ``partitions`` concurrently, each to its end whatever the others meet, then
        raise the first failure: a release cut short by a sibling's failure (the first of a
        connection loss) would leave its node to this session with its claim gone and no doubt
        recorded, where the next owner waits for it for the session's life."""
        results = await settle(functools.partial(self._release_node, p) for p in partitions)
        for result in results:
            if isinstance(result, Exception):
                raise result

    async def _release_node(self, partition: PartitionKey) -> None:
        claim = self._states.released(partition)
        if self._starter is not None:
            await self._starter.release(partition)
        if claim is not None:
            await self._nodes.release(partition, claim.node_version, claim.epoch)

    async def _claim_all(self, partitions: list[PartitionKey], epoch: int) -> bool:
        """Claim partitions concurrently; False when any could not be claimed in time."""
        results = await settle(functools.partial(self._claim, p, epoch) for p in partitions)
        for result in results:
            if isinstance(result, Exception):
                raise result
        return all(results)

    async def _claim(self, partition: PartitionKey, epoch: int) -> bool:
        """Claim a partition and learn its stored offset. False when its previous owner did not
        release it in time, or a newer rebalance was asked for meanwhile; the claim is then left
        to the next rebalance."""
        taken = await self._nodes.take(partition, self._claim_timeout, self._requested)
        if taken is None:
            return False
        start: int | None = None
        try:
            stored = start = await self._offsets.stored(partition)
            if self._starter is not None:
                start = await self._starter.claim(partition, stored)
        except BaseException:
            # No claim records the node: give it back at once, or it would block the partition
            # for this session's life once the assignment moves it elsewhere.
            await self._unrecorded(partition, taken)
            raise
        if self._epoch != epoch:
            # Checked after the last wait: a claim of a lost session must never be recorded.
            # Its node is given back all the same: kazoo sends a create queued across the
            # expiry on the next session, where it would block the partition for that
            # session's life (under the claim's fence, so no other claim's node is touched).
            await self._unrecorded(partition, taken)
            raise SessionLostError("the ZooKeeper session expired during the rebalance")
        self._states.claimed(
            Claim(
                partition=partition,
                node_version=taken.node_version,
                next_offset=UNPOSITIONED if start is None else start,
                stored=stored,
                # A start other than the stored offset (Kafka's, exactly once) is stored next.
                pending=None if start == stored else start,
                epoch=taken.epoch,
            )
        )
        return True

    async def _unrecorded(self, partition: PartitionKey, taken: Taken) -> None:
        """A claim taken is not recorded: what started with it ends, its node is given back."""
        if self._starter is not None:
            with anyio.CancelScope(shield=True):
                await self._starter.release(partition)
        await self._nodes.unrecorded(partition, taken.node_version, taken.epoch)

    async def leave(self, handover: Handover) -> None:
        """Give up every claim (the listener hears of them, their pending offsets are stored),
        release them and delete the registration."""
        async with self.lock:
            await handover.give_up(sorted(self._claims))
            # All at once: with many partitions, one round trip instead of one per claim. In a
            # task group (see aio_cluster.concurrency): cut short by the closing's deadline,
            # asyncio's gather, when a release finished anyway, raised a CancelledError the
            # deadline let through, and close() raised it to a caller nobody cancelled.
            await self._release_all(list(self._claims))
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
