"""Membership: this member's registration, the live members, the rebalance under the lock, and
the claims it makes and releases in ZooKeeper.

A member may read many topics (a list, or a pattern that follows the cluster's topics). Each
topic is assigned on its own, among the members whose subscriptions read it, oldest first: with
the sticky strategy each topic has its own published target and its own leader (the oldest
member reading it), so joins and leaves move the fewest partitions per topic. Partitions are
known by key (`aio_cluster.kafka.topics.TopicKeys`; a one-topic member's keys are its partition
ids).

What happens to a partition's batches and offsets around a handover is not this part's business:
it asks the `Handover` to drain what it releases and to start what it claimed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import anyio

from ..assign.strategies import Strategy, assign
from ..assign.subscription import Subscription
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
from ..kafka.fetcher import Fetcher
from ..kafka.topics import TopicKeys
from ..zookeeper.client import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    SessionState,
    ZooKeeper,
)
from ..zookeeper.layout import GroupLayout, Registration, decode_registration, encode_registration
from .claiming import ClaimNodes
from .claims import UNPOSITIONED, Claim
from .handover import Handover
from .offsets import Offsets
from .partitions import PartitionStates
from .target_node import TargetNode
from .topics import KeyedLayout

__all__ = ["Membership"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_RETRY_DELAY = 1.0
"""Seconds before a rebalance that could not finish (a claim timed out, ZooKeeper failed) is
tried again."""


@dataclass
class _Topic:
    """What this member knows of one topic it reads."""

    name: str
    layout: GroupLayout
    target: TargetNode
    partitions: list[int] = field(default_factory=list)
    """The topic's partition ids, sorted (as of the last metadata check or target followed)."""
    waiting: bool = False
    """True while the topic does not exist (logged once)."""
    prepared: bool = False
    """Whether its owner, offset and fence parents were made sure of."""
    leading: bool = False
    """Whether this member was its sticky leader at the last rebalance."""
    counts: collections.Counter[str] = field(default_factory=collections.Counter)
    """member -> the partitions the target last followed gives it (sticky)."""


class _Turns:
    """The order in which a many-topic member decides the targets of the topics it leads.

    Their reads and writes run at once, but each target is computed after the one before it was
    decided, against what every other topic gives each member (`sticky()`'s loads): so the
    members' totals balance, and the result does not depend on which request returned first.
    """

    def __init__(self, topics: Mapping[str, _Topic], led: list[str]) -> None:
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


class Membership:
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
        subscription: Subscription | None = None,
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
        subscription: the topics this member reads (None: the first topic of ``layout``'s
            keys).
        """
        self._zk = zk
        self._layout = layout
        self._keys: TopicKeys = layout.keys
        if subscription is None:
            subscription = Subscription(kind="static", topics=(layout.keys.topic(0),))
        self._subscription = subscription
        self._rebalance_timeout = rebalance_timeout
        self._topics: dict[str, _Topic] = {}
        """The topics this member reads now, by name."""
        self._cluster: dict[str, list[int]] | None = None
        """A pattern member's view of the cluster's topics and their partitions (metadata)."""
        self._fetcher = fetcher
        self._offsets = offsets
        self._id = member_id
        self._strategy = strategy
        self._claim_timeout = claim_timeout
        self._named = named
        self._rejoin_grace = rejoin_grace
        self._nodes = ClaimNodes(zk, layout, member_id, takes_over=named)
        self._wait_for_topic = wait_for_topic
        self.rebalances = 0
        """Rebalances that finished (a claim may have timed out in them)."""
        self.last_rebalance: float | None = None
        """How long the last finished rebalance took, in seconds."""
        self.recent_rebalances: collections.deque[float] = collections.deque(maxlen=100)
        """How long the last (at most 100) finished rebalances took, oldest first (metrics)."""
        self._states = states
        self._claims: Mapping[int, Claim] = states.claims
        self._epoch = 0
        """Counts session losses: a rebalance that began before one must not record claims."""
        self._registered_session: int | None = None
        self._registration_czxid: int | None = None
        """The creation zxid of this member's registration: another one under the same name
        (a named member's newer self) has a later one."""
        self._registration_touched = asyncio.Event()
        """Set when this member registered, or its registration changed (a watch)."""
        self._members: dict[str, tuple[Registration, int]] = {}
        self._ids_read: tuple[frozenset[str], int] | None = None
        """The registration names last listed, and the ``ids`` node's child version then."""
        for topic in subscription.topics:
            self._topic(topic)
        self._in_target = False
        """Whether the assignment followed counts this member (a sticky newcomer's first
        rebalance may still see the target of the members before it): joining ends then."""
        self._lock = asyncio.Lock()
        """Held by a rebalance: one runs at a time, so claims and releases never interleave."""
        self._rebalance_requested = asyncio.Event()

    @property
    def claims(self) -> Mapping[int, Claim]:
        """The claims this member holds now, by partition."""
        return self._claims

    @property
    def claim_timeouts(self) -> int:
        """Claims not made within ``claim_timeout``."""
        return self._nodes.timeouts

    @property
    def unowned_nodes(self) -> int:
        """Claims given up on an owner node that no registered member's session holds."""
        return self._nodes.unowned

    @property
    def partitions(self) -> list[int]:
        """The key of every partition of the topics read, sorted (as of the last metadata check
        or target followed)."""
        return sorted(
            key
            for state in self._topics.values()
            for key in self._keys.keys(state.name, state.partitions)
        )

    @property
    def topics(self) -> list[str]:
        """The topics this member reads now, sorted."""
        return sorted(self._topics)

    def _topic(self, name: str) -> _Topic:
        """The state of topic ``name`` (made when met first)."""
        state = self._topics.get(name)
        if state is None:
            layout = self._layout.of(name)
            self._keys.number(name)
            state = self._topics[name] = _Topic(
                name=name,
                layout=layout,
                target=TargetNode(
                    self._zk, layout, self._id, takeover_after=self._rebalance_timeout
                ),
            )
        return state

    async def _prepare_topic(self, state: _Topic) -> None:
        """The parents of the topic's owner, offset and fence nodes exist."""
        if not state.prepared:
            layout = state.layout
            paths = (layout.owners, layout.offsets, layout.fences)
            await asyncio.gather(*(self._zk.ensure_path(path) for path in paths))
            state.prepared = True

    async def prepare(self) -> None:
        """Before registering, in ZooKeeper: the group's paths exist, the strategy agrees.

        Needs only the ZooKeeper session, so that it runs while the Kafka clients start.

        Raises:
            StrategyMismatchError: the group uses another assignment strategy.
        """
        # Refuse before registering, so that the group never sees this member.
        self._check_strategy(await self._while_session_lives(self._prepare_nodes))

    async def check_topic(self) -> None:
        """Before registering, in Kafka: a member that may not wait for its topic refuses to
        join when it does not exist. A member that waits asks nothing here: its first rebalance
        asks the partitions when it needs them (a sticky follower never does).

        Raises:
            ConfigurationError: the topic does not exist (and the member may not wait for it).
        """
        if not self._wait_for_topic:
            for state in list(self._topics.values()):
                state.partitions = await self._topic_partitions(state)

    async def _prepare_nodes(self) -> dict[str, tuple[Registration, int]]:
        """The group's paths exist; returns the members registered now."""
        await self._zk.ensure_path(self._layout.root, shared=True)
        await asyncio.gather(
            self._zk.ensure_path(self._layout.ids),
            *(self._prepare_topic(state) for state in list(self._topics.values())),
        )
        return await self._read_members(watch=False)

    async def _while_session_lives(self, step: Callable[[], Awaitable[T]]) -> T:
        """Run ``step`` again after a retriable ZooKeeper error, while the session may still
        live: a ZooKeeper restart shorter than the session must not fail a join.

        Raises:
            CoordinationError: the error is not retriable, the session was lost, or
                ``session_timeout`` passed since the first failure (the session is gone by then,
                even when this client cannot learn it).
        """
        loop = asyncio.get_running_loop()
        deadline: float | None = None
        while True:
            try:
                return await step()
            except CoordinationError as exc:
                if deadline is None:
                    deadline = loop.time() + self._zk.session_timeout
                if (
                    not exc.retriable
                    or isinstance(exc, SessionLostError)
                    or self._zk.state in (SessionState.LOST, SessionState.CLOSED)
                    or loop.time() + _RETRY_DELAY > deadline
                ):
                    raise
                log.warning("member %s: joining: %s; trying again", self._id, exc)
            await asyncio.sleep(_RETRY_DELAY)

    async def _topic_partitions(self, state: _Topic) -> list[int]:
        """The topic's partitions; none while it does not exist and the member waits for it."""
        if self._subscription.is_pattern:
            # A pattern's topics exist by definition: its partitions came with the listing.
            return list((self._cluster or {}).get(state.name, []))
        try:
            partitions = await self._fetcher.partitions(state.name)
        except ConfigurationError:
            if not self._wait_for_topic:
                raise
            if not state.waiting:
                log.warning(
                    "member %s: topic %r does not exist yet; waiting for it",
                    self._id,
                    state.name,
                )
                state.waiting = True
            return []
        state.waiting = False
        return partitions

    async def _list_topics(self) -> bool:
        """A pattern member reads the cluster's topics; True when those it reads changed.

        An empty listing while topics were known is taken for a broker's blip and ignored. A
        topic read until now that the listing leaves out is asked on its own (`_still_there`):
        the listing also leaves out a topic it names with a passing error code.

        Raises:
            BrokerError: the metadata request failed.
        """
        found = await self._fetcher.topics()
        if not found and self._cluster:
            log.warning("member %s: Kafka lists no topic now; keeping those known", self._id)
            return False
        before = {t: p for t, p in (self._cluster or {}).items() if self._subscription.matches(t)}
        missing = sorted(set(before) - set(found))
        again = await asyncio.gather(*(self._still_there(t, before[t]) for t in missing))
        found.update((t, p) for t, p in zip(missing, again, strict=True) if p is not None)
        self._cluster = found
        after = {t: p for t, p in found.items() if self._subscription.matches(t)}
        if before != after:
            log.info("member %s: the topics matching now: %s", self._id, sorted(after))
            return True
        return False

    async def _still_there(self, topic: str, known: list[int]) -> list[int] | None:
        """The partitions of a topic read until now that the listing left out; None when Kafka
        says again that it does not exist (so it was deleted).

        Any other answer keeps the topic: releasing it on one passing error code (its leader
        moving) would stop its partitions for every member that reads it, and the leader would
        delete its target. A failure keeps the partitions ``known``.
        """
        try:
            return await self._fetcher.partitions(topic)
        except ConfigurationError:
            return None
        except BrokerError as exc:
            log.warning(
                "member %s: topic %r not listed, %s; keeping its partitions %s",
                self._id,
                topic,
                exc,
                known,
            )
            return known

    def request_rebalance(self) -> None:
        """Rebalance again soon (a member came or went, the topic changed, the session is back)."""
        self._rebalance_requested.set()

    async def check_partitions(self) -> None:
        """Ask for a rebalance when the topic's partitions changed.

        With the sticky strategy only the leader asks Kafka (it publishes the partitions in the
        target, which the others follow): a topic's metadata costs every member that reads it
        CPU in proportion to its partitions, and a hundred members asking every few seconds
        would keep a machine busy with 10,000 partitions.
        """
        if self._subscription.is_pattern and await self._list_topics():
            # Every pattern member lists the topics (it must learn which ones it reads); the
            # partitions come with the listing.
            self.request_rebalance()
        for state in list(self._topics.values()):
            if self._strategy is Strategy.STICKY and not self._leads(state.name):
                continue
            partitions = await self._topic_partitions(state)
            if partitions != state.partitions:
                log.info("topic %r now has partitions %s", state.name, partitions)
                state.partitions = partitions
                self.request_rebalance()

    def _leads(self, topic: str) -> bool:
        """Whether this member was the sticky leader of ``topic`` (the oldest member reading it
        with this strategy) at the last rebalance."""
        ours = [
            (czxid, member)
            for member, (info, czxid) in self._members.items()
            if info.subscribes(topic) and info.strategy == self._strategy
        ]
        return bool(ours) and min(ours)[1] == self._id

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
        self._registered_session = None

    async def run(
        self,
        joined: asyncio.Future[None],
        handover: Handover,
        fail: Callable[[AioClusterError], None],
    ) -> None:
        """Rebalance whenever asked, until cancelled; ``joined`` is settled by the first one.

        An error that no retry can mend (a corrupted offset) ends the loop: before joining it
        settles ``joined``, after joining it goes to ``fail``. A named member also watches its
        registration meanwhile (see `_guard_name()`).
        """
        async with anyio.create_task_group() as tasks:
            if self._named:
                tasks.start_soon(self._guard_name, fail)
            await self._rebalances(joined, handover, fail)
            tasks.cancel_scope.cancel()

    async def _rebalances(
        self,
        joined: asyncio.Future[None],
        handover: Handover,
        fail: Callable[[AioClusterError], None],
    ) -> None:
        retry: float | None = 0.0
        loop = asyncio.get_running_loop()
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._rebalance_requested.wait(), retry)
            self._rebalance_requested.clear()
            await handover.report_lost()
            if self._zk.state is not SessionState.CONNECTED:
                retry = None
                continue
            started = loop.time()
            try:
                async with self._lock:
                    complete = await self._rebalance(handover)
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
            retry = None if complete else _RETRY_DELAY
            if not joined.done() and self._in_target:
                joined.set_result(None)

    async def _rebalance(self, handover: Handover) -> bool:
        """Release what the assignment no longer gives this member, then claim what it does.

        Returns:
            False when a claim could not be made in time, so the rebalance is tried again.
        """
        epoch = self._epoch
        if self._registered_session != self._zk.session_id:
            await self._register_node()
        members = await self._read_members()
        mine = members.get(self._id)
        if self._named and mine is not None and mine[1] != self._registration_czxid:
            # Another member took the name: its registration replaced ours. (One that is only
            # gone went with an expired session, or a tool deleted it: register again.)
            self._replaced()
        if mine is None:
            # Our registration went behind our back (deleted by a tool): register again.
            await self._register_node()
            members = await self._read_members()
        self._check_strategy(members)
        ordered = [
            (member, info)
            for member, (info, _czxid) in sorted(members.items(), key=lambda item: item[1][1])
            if info.strategy == self._strategy
        ]
        states = await self._current_topics()
        readers = {
            state.name: [member for member, info in ordered if info.subscribes(state.name)]
            for state in states
        }
        sticky = self._strategy is Strategy.STICKY
        led = [s.name for s in states if sticky and readers[s.name][:1] == [self._id]]
        turns = _Turns(self._topics, led) if len(self._topics) > 1 else None
        # Every named member's grace; a target keeps only those of the members it counts.
        graces = {
            member: info.rejoin_grace
            for member, (info, _czxid) in members.items()
            if info.rejoin_grace
        }
        found = await asyncio.gather(
            *(self._target_of_topic(s, readers[s.name], graces, turns) for s in states)
        )
        target: set[int] = set()
        self._in_target = True
        for keys, counted in found:
            target |= keys
            self._in_target = self._in_target and counted
        self._states.expected(target)
        fenced = self._states.fenced
        if fenced:
            log.warning(
                "member %s: claims of partitions %s are gone; dropping them",
                self._id,
                self._layout.labels(fenced),
            )
        leaving = sorted((set(self._claims) - target) | set(fenced))
        kept: list[int] = []
        if leaving:
            try:
                kept = await handover.revoke(leaving)
                leaving = [p for p in leaving if p not in kept]
                await asyncio.gather(*(self._release_node(p) for p in leaving))
            finally:
                handover.released(leaving)
        complete = await self._claim_all(sorted(target - set(self._claims)), epoch)
        # A partition kept while its handler ignores cancellation is released by a later try.
        complete = complete and not kept
        if await handover.assigned():
            log.info(
                "member %s owns %s of %s",
                self._id,
                self._layout.labels(sorted(self._claims)),
                self._layout.labels(self.partitions),
            )
        await self._nodes.reconcile(self._claims)
        await self._retire()
        return complete

    async def _current_topics(self) -> list[_Topic]:
        """The states of the topics this member reads now (a pattern's follow the cluster's)."""
        if self._subscription.is_pattern:
            if self._cluster is None:
                await self._list_topics()
            names = self._subscription.select(self._cluster or {})
        else:
            names = list(self._subscription.topics)
        states = [self._topic(name) for name in names]
        await asyncio.gather(*(self._prepare_topic(state) for state in states))
        return states

    async def _retire(self) -> None:
        """Forget the topics a pattern no longer reads (deleted, or renamed out of it): their
        partitions were released by the rebalance; the target node of a deleted topic goes
        with it (deleted by the member that led it, unless written again since)."""
        if not self._subscription.is_pattern:
            return
        reading = set(self._subscription.select(self._cluster or {}))
        for name in sorted(set(self._topics) - reading):
            state = self._topics.pop(name)
            state.target.close()
            if state.leading and name not in (self._cluster or {}):
                if await state.target.delete():
                    log.info("member %s: topic %r is gone; its target deleted", self._id, name)
                else:
                    log.info(
                        "member %s: topic %r is gone; its target, written since, stays",
                        self._id,
                        name,
                    )

    async def _target_of_topic(
        self,
        state: _Topic,
        members: list[str],
        graces: Mapping[str, float],
        turns: _Turns | None = None,
    ) -> tuple[set[int], bool]:
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
        state: _Topic,
        members: list[str],
        graces: Mapping[str, float],
        turns: _Turns | None,
    ) -> tuple[set[int], bool]:
        state.leading = members[:1] == [self._id]
        # A sticky follower takes the partitions from the published target. The leader asks Kafka
        # only while it knows none: a change of the members does not change the partitions, and
        # `check_partitions` brings it news of those, so a join or a leave waits on no metadata
        # request (with 10,000 partitions, each costs a tenth of a second of CPU or more). Every
        # member of the other strategies asks at each rebalance, so that all agree.
        if self._strategy is not Strategy.STICKY or (state.leading and not state.partitions):
            await self._refresh_partitions(state)
        owned_here = {k for k in self._claims if self._keys.topic(k) == state.name}
        if self._strategy is not Strategy.STICKY:
            mine = assign(self._strategy, state.partitions, members).get(self._id, [])
            return set(self._keys.keys(state.name, mine)), True
        target = await state.target.follow(
            members,
            state.partitions,
            self.request_rebalance,
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

    async def _refresh_partitions(self, state: _Topic) -> None:
        """Ask Kafka for the topic's partitions; a passing failure keeps those known."""
        try:
            partitions = await self._topic_partitions(state)
        except BrokerError as exc:
            if not state.partitions:
                raise
            # Kafka is away: agree on the partitions known, so claims can move meanwhile.
            log.warning("member %s: using the partitions known, %s", self._id, exc)
            return
        if partitions or not state.partitions:
            state.partitions = partitions
        else:
            # A topic known a moment ago is "unknown" now: a broker restarting says so
            # for a moment. Releasing everything on it would stop the whole group.
            log.warning(
                "member %s: Kafka does not know topic %r now; keeping its partitions %s",
                self._id,
                state.name,
                state.partitions,
            )

    async def _register_node(self) -> None:
        """Create this member's registration. A named member's first registration takes the
        name over from an older registration (its own previous run, whose session may live
        on after a SIGKILL); once registered, a named member that finds the name taken was
        replaced, and stops."""
        path = self._layout.member(self._id)
        data = encode_registration(
            self._subscription,
            self._strategy,
            int(time.time() * 1000),
            name=self._id if self._named else None,
            rejoin_grace=self._rejoin_grace,
        )
        session = self._zk.session_id
        while True:
            with contextlib.suppress(NodeExistsError):
                await self._zk.create(path, data, ephemeral=True)
            stat = await self._zk.exists(path)
            if stat is None:
                continue  # deleted at once (by a member taking the name over): look again
            if stat.ephemeral_owner == session:
                break
            if not self._named:
                raise CoordinationError(f"registration {path} still belongs to an expired session")
            if self._registration_czxid is not None:
                self._replaced()
            log.warning(
                "member %s: taking the name over from session %#x", self._id, stat.ephemeral_owner
            )
            with contextlib.suppress(NoNodeError, BadVersionError):
                await self._zk.delete(path, version=stat.version)
        self._registration_czxid = stat.czxid
        self._registered_session = session
        self._registration_touched.set()

    async def _guard_name(self, fail: Callable[[AioClusterError], None]) -> None:
        """Watch a named member's registration: once another session holds the name, stop
        handing out batches at once and fail the member. The rebalance finds the takeover too,
        but it may be busy for up to ``rebalance_timeout`` (in a listener) while the newcomer
        already handles this member's partitions."""
        path = self._layout.member(self._id)
        touched = self._registration_touched
        while True:
            touched.clear()
            czxid, session = self._registration_czxid, self._registered_session
            if czxid is not None and session is not None and session == self._zk.session_id:
                try:
                    stat = await self._zk.exists(path, watch=touched.set)
                except CoordinationError:
                    # The rebalance and liveness deal with ZooKeeper's troubles; look again.
                    await asyncio.sleep(_RETRY_DELAY)
                    continue
                if stat is not None and stat.czxid != czxid and stat.ephemeral_owner != session:
                    with contextlib.suppress(MemberReplacedError):
                        self._replaced()
                    log.error("member %s: another member took its name over", self._id)
                    fail(MemberReplacedError(self._layout.group, self._id))
                    return
            await touched.wait()

    def _replaced(self) -> None:
        """A newer member holds this member's name: stop, and leave its nodes alone."""
        self._registered_session = None
        self._states.lost()
        raise MemberReplacedError(self._layout.group, self._id)

    async def _read_members(self, *, watch: bool = True) -> dict[str, tuple[Registration, int]]:
        """The live members, each with its registration's info and creation zxid. ``watch`` asks
        for a rebalance at the next change.

        Registrations seen before are not read again, unless the ``ids`` node's child version
        shows more changes than the names that came and went: then one was deleted and made
        again under the same id (a member, this one too, back from an expiry) and has a new
        creation zxid, so every registration is read afresh.
        """
        ids, version = await self._zk.get_children_version(
            self._layout.ids, watch=self.request_rebalance if watch else None
        )
        names = frozenset(ids)
        fresh = self._ids_read is not None and version - self._ids_read[1] == len(
            names ^ self._ids_read[0]
        )
        self._ids_read = (names, version)
        cached = self._members if fresh else {}
        known = {member: cached[member] for member in ids if member in cached}
        new = [member for member in ids if member not in known]
        # Concurrently: a member joining a large group reads every registration once.
        read = await asyncio.gather(
            *(self._zk.get(self._layout.member(member)) for member in new), return_exceptions=True
        )
        for member, result in zip(new, read, strict=True):
            if isinstance(result, NoNodeError):
                continue
            if isinstance(result, BaseException):
                raise result
            data, stat = result
            try:
                known[member] = (decode_registration(data), stat.czxid)
            except CoordinationError as exc:
                log.warning("ignoring member %s: %s", member, exc)
        self._members = known
        return known

    def _check_strategy(self, members: dict[str, tuple[Registration, int]]) -> None:
        """The oldest member's strategy is the group's; a member with another may not join."""
        if not members:
            return
        oldest, (info, _czxid) = min(members.items(), key=lambda item: item[1][1])
        if info.strategy != self._strategy and oldest != self._id:
            theirs = getattr(info.strategy, "value", info.strategy)
            raise StrategyMismatchError(
                f"group {self._layout.group!r} assigns partitions with {theirs!r}, this member "
                f"with {self._strategy.value!r}: every member of a group must use the same strategy"
            )

    async def _release_node(self, partition: int) -> None:
        claim = self._states.released(partition)
        if claim is not None:
            await self._nodes.release(partition, claim.node_version, claim.epoch)

    async def _claim_all(self, partitions: list[int], epoch: int) -> bool:
        """Claim partitions concurrently; False when any could not be claimed in time."""
        results = await asyncio.gather(
            *(self._claim(partition, epoch) for partition in partitions), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return all(results)

    async def _claim(self, partition: int, epoch: int) -> bool:
        """Claim a partition and learn its stored offset. False when its previous owner did not
        release it in time, or a newer rebalance was asked for meanwhile; the claim is then left
        to the next rebalance."""
        taken = await self._nodes.take(partition, self._claim_timeout, self._rebalance_requested)
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
        async with self._lock:
            await handover.give_up(sorted(self._claims))
            # All at once: with many partitions, one round trip instead of one per claim.
            await asyncio.gather(*(self._release_node(p) for p in list(self._claims)))
            if self._registered_session is not None:
                await self._delete_registration()

    async def _delete_registration(self) -> None:
        """Delete this member's registration, unless it is not this session's any more (a named
        member's newer self holds the name)."""
        path = self._layout.member(self._id)
        with contextlib.suppress(NoNodeError, BadVersionError):
            _data, stat = await self._zk.get(path)
            if stat.ephemeral_owner == self._zk.session_id:
                await self._zk.delete(path, version=stat.version)

    def forget(self) -> None:
        """The member closed: whatever was not released goes with the session."""
        self._states.forget()
        for state in self._topics.values():
            state.target.close()
