"""GroupPlace: a member's place in the group, put together from the three parts that keep it.

- `aio_cluster.member.protocol.registration`: this member's registration, the name it holds, the
  members it sees and the strategy they share;
- `aio_cluster.member.protocol.topics`: which topics and partitions it reads, and when they changed;
- `aio_cluster.member.protocol.rebalance`: the rebalance under the lock, and the claims it makes and
  releases, after its `aio_cluster.member.protocol.assignment` says which partitions are this
  member's.

The rebalance (through its assignment) asks the other two; neither of them knows it. This
composition builds them from one set of arguments, and runs the few steps that need more than
one of them (getting ready before registering, running the rebalances beside a named member's
watch on its name).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import anyio

from ...assign.racks import Placement
from ...assign.strategies import Strategy
from ...assign.subscription import Subscription
from ...errors import AioClusterError
from ...kafka.fetcher import Fetcher
from ...kafka.topics import PartitionKey
from ...zookeeper.client import ZooKeeper
from ..delivery.claims import Claim
from ..delivery.partitions import PartitionStates
from .handover import Handover
from .keyed_layout import KeyedLayout
from .offsets import Offsets
from .rebalance import ClaimStarter, Rebalancer
from .registration import Registrar
from .topics import Topics, TopicState

if TYPE_CHECKING:
    from ...otel.telemetry import Telemetry

__all__ = ["GroupPlace"]


class GroupPlace:
    """This member's place in the group, as ZooKeeper records it."""

    def __init__(
        self,
        zk: ZooKeeper,
        layout: KeyedLayout,
        fetcher: Fetcher,
        offsets: Offsets,
        states: PartitionStates,
        *,
        member_id: str,
        strategy: Strategy,
        claim_timeout: float,
        wait_for_topic: bool,
        rebalance_timeout: float = 60.0,
        named: bool = False,
        rejoin_grace: float | None = None,
        rack: str | None = None,
        subscription: Subscription | None = None,
        telemetry: Telemetry | None = None,
        starter: ClaimStarter | None = None,
    ) -> None:
        """Args:
        zk: the member's ZooKeeper client.
        layout: the group's paths, by partition key.
        fetcher: asked for the topics and their partitions.
        offsets: read for the start of each new claim.
        states: the member's partition states: told of each claim made, released or lost.
        member_id: this member's id.
        strategy: the assignment strategy.
        claim_timeout: seconds to wait for a partition's previous owner to release it.
        wait_for_topic: a topic that does not exist yet has no partitions (instead of failing).
        rebalance_timeout: how long the sticky target may not follow the registrations before
            a member other than the leader publishes it (see `aio_cluster.assign.target`).
        named: ``member_id`` is the user's ``member_name``: a member registering under it takes
            the registration and the claims of an older one (its restart), and this member,
            once taken over, stops with `MemberReplacedError`.
        rejoin_grace: for a named member, how long its partitions wait for it once it is gone.
        rack: the member's rack, published in its registration.
        subscription: the topics this member reads (None: the first topic of ``layout``'s
            keys).
        telemetry: traces each rebalance, if given.
        starter: started with each claim and ended with it (exactly once: the partition's
            producer), if given.
        """
        if subscription is None:
            subscription = Subscription(kind="static", topics=(layout.keys.topic(PartitionKey(0)),))
        self._states = states
        self._strategy = strategy
        self._named = named
        self._registration = Registrar(
            zk,
            layout,
            states,
            member_id=member_id,
            strategy=strategy,
            subscription=subscription,
            named=named,
            rejoin_grace=rejoin_grace,
            rack=rack,
        )
        self._topics = Topics(
            zk,
            layout,
            fetcher,
            subscription,
            member_id=member_id,
            wait_for_topic=wait_for_topic,
            rebalance_timeout=rebalance_timeout,
        )
        self._rebalancer = Rebalancer(
            zk,
            layout,
            self._registration,
            self._topics,
            offsets,
            states,
            member_id=member_id,
            strategy=strategy,
            claim_timeout=claim_timeout,
            named=named,
            telemetry=telemetry,
            starter=starter,
        )

    @property
    def claims(self) -> Mapping[PartitionKey, Claim]:
        """The claims this member holds now, by partition."""
        return self._states.claims

    @property
    def partitions(self) -> list[PartitionKey]:
        """The key of every partition of the topics read, sorted (as of the last metadata check
        or target followed)."""
        return self._topics.partitions

    @property
    def topics(self) -> list[str]:
        """The topics this member reads now, sorted."""
        return self._topics.names

    @property
    def rebalances(self) -> int:
        """Rebalances that finished (a claim may have timed out in them)."""
        return self._rebalancer.rebalances

    @property
    def last_rebalance(self) -> float | None:
        """How long the last finished rebalance took, in seconds."""
        return self._rebalancer.last_rebalance

    @property
    def recent_rebalances(self) -> collections.deque[float]:
        """How long the last (at most 100) finished rebalances took, oldest first (metrics)."""
        return self._rebalancer.recent_rebalances

    @property
    def claim_timeouts(self) -> int:
        """Claims not made within ``claim_timeout``."""
        return self._rebalancer.claim_timeouts

    @property
    def unowned_nodes(self) -> int:
        """Claims given up on an owner node that no registered member's session holds."""
        return self._rebalancer.unowned_nodes

    @property
    def _lock(self) -> asyncio.Lock:
        """Held by a rebalance (and by `leave()`): one runs at a time."""
        return self._rebalancer.lock

    async def prepare(self) -> None:
        """Before registering, in ZooKeeper: the group's paths and its topics' exist, the
        strategy agrees (see `Registrar.prepare()`).

        Raises:
            StrategyMismatchError: the group uses another assignment strategy.
        """
        await self._registration.prepare(self._topics.prepare)

    async def check_topic(self) -> None:
        """Before registering, in Kafka: a member that may not wait for its topic refuses to
        join when it does not exist. A member that waits asks nothing here: its first rebalance
        asks the partitions when it needs them (a sticky follower never does).

        Raises:
            ConfigurationError: the topic does not exist (and the member may not wait for it).
        """
        await self._topics.check_exists()

    async def check_partitions(self) -> None:
        """Ask for a rebalance when the topics read or their partitions changed.

        With the sticky strategy only the leader asks Kafka (it publishes the partitions in the
        target, which the others follow): a topic's metadata costs every member that reads it
        CPU in proportion to its partitions, and a hundred members asking every few seconds
        would keep a machine busy with 10,000 partitions.
        """
        sticky = self._strategy is Strategy.STICKY
        await self._topics.check(
            lambda topic: not sticky or self._registration.leads(topic),
            self.request_rebalance,
            self._replicas_move,
        )

    def _replicas_move(self, state: TopicState) -> bool:
        """Whether the target of ``state``'s topic would move partitions under the racks of
        its replicas now (see `TargetNode.misplaces`); never without a member in a rack."""
        racks = self._registration.racks(state.name)
        return (
            self._strategy is Strategy.STICKY
            and bool(racks)
            and state.target.misplaces(Placement(racks, state.replicas or {}))
        )

    def request_rebalance(self) -> None:
        """Rebalance again soon (see `Rebalancer.request()`)."""
        self._rebalancer.request()

    async def run(
        self,
        joined: asyncio.Future[None],
        handover: Handover,
        fail: Callable[[AioClusterError], None],
    ) -> None:
        """Run the rebalances until cancelled (see `Rebalancer.run()`: ``joined`` is settled by
        the first), and, for a named member, the watch on its name beside them (see
        `Registrar.guard_name()`); either gives ``fail`` what ends the member."""
        async with anyio.create_task_group() as tasks:
            if self._named:
                tasks.start_soon(self._registration.guard_name, fail)
            await self._rebalancer.run(joined, handover, fail)
            tasks.cancel_scope.cancel()

    async def leave(self, handover: Handover) -> None:
        """Release every claim and delete the registration (see `Rebalancer.leave()`)."""
        await self._rebalancer.leave(handover)

    def lose(self) -> None:
        """The session expired: every claim and the registration are gone with it (see
        `Rebalancer.lose()`)."""
        self._rebalancer.lose()

    def forget(self) -> None:
        """The member closed: whatever was not released goes with the session."""
        self._states.forget()
        self._topics.close()
