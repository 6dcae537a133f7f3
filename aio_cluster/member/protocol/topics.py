"""Topics: which topics and partitions a member reads now, and when they changed.

A member may read many topics: a list, or a pattern that follows the cluster's topics as they are
created and deleted. This part keeps what the member knows of each (its classic layout, its
sticky target's node, its partitions) and asks Kafka's metadata for news: a pattern member lists
the cluster's topics, and a member that may not wait for its topic refuses to join without it.
It decides nothing about who owns what: the assignment (`aio_cluster.member.protocol.assignment`)
asks it which topics are read now and their partitions, and the rebalance is told when they change.

Kafka's metadata is not always right for a moment (a broker restarting calls a topic unknown, a
listing leaves out a topic whose leader moves): a topic known a moment ago keeps its partitions
until Kafka says again that it is gone, since releasing it would stop it for the whole group.
"""

from __future__ import annotations

import collections
import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ...assign.subscription import Subscription
from ...concurrency import gather, settle
from ...errors import BrokerError, ConfigurationError
from ...kafka.fetcher import Fetcher
from ...kafka.placement import Replicas
from ...kafka.topics import PartitionKey
from ...zookeeper.client import ZooKeeper
from ...zookeeper.layout import GroupLayout
from .keyed_layout import KeyedLayout
from .target_node import TargetNode

__all__ = ["TopicState", "Topics"]

log = logging.getLogger(__name__)


@dataclass
class TopicState:
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
    shared: bool = False
    """Whether this member's share of the topic was there when it last read it."""
    replicas: Replicas | None = None
    """partition -> the racks of its replicas, as of the last metadata check (None: not asked
    yet); what the rack-aware target needs (see `aio_cluster.assign.racks`)."""


class Topics:
    """The topics one member reads, and their partitions."""

    def __init__(
        self,
        zk: ZooKeeper,
        layout: KeyedLayout,
        fetcher: Fetcher,
        subscription: Subscription,
        *,
        member_id: str,
        wait_for_topic: bool,
        rebalance_timeout: float,
    ) -> None:
        """Args:
        zk: the member's ZooKeeper client (a topic's parent nodes, its target node).
        layout: the group's paths, by partition key.
        fetcher: asked for the topics and their partitions.
        subscription: the topics this member reads.
        member_id: this member's id.
        wait_for_topic: a topic that does not exist yet has no partitions (instead of failing).
        rebalance_timeout: passed to each topic's `TargetNode` (its ``takeover_after``).
        """
        self._zk = zk
        self._layout = layout
        self._keys = layout.keys
        self._fetcher = fetcher
        self._subscription = subscription
        self._id = member_id
        self._wait_for_topic = wait_for_topic
        self._rebalance_timeout = rebalance_timeout
        self._topics: dict[str, TopicState] = {}
        """The topics this member reads now, by name."""
        self._cluster: dict[str, list[int]] | None = None
        """A pattern member's view of the cluster's topics and their partitions (metadata)."""
        for topic in subscription.topics:
            self._topic(topic)

    @property
    def states(self) -> Mapping[str, TopicState]:
        """The topics this member reads now, by name."""
        return self._topics

    @property
    def names(self) -> list[str]:
        """The topics this member reads now, sorted."""
        return sorted(self._topics)

    @property
    def partitions(self) -> list[PartitionKey]:
        """The key of every partition of the topics read, sorted (as of the last metadata check
        or target followed)."""
        return sorted(
            key
            for state in self._topics.values()
            for key in self._keys.keys(state.name, state.partitions)
        )

    def _topic(self, name: str) -> TopicState:
        """The state of topic ``name`` (made when met first)."""
        state = self._topics.get(name)
        if state is None:
            layout = self._layout.of(name)
            self._keys.number(name)
            state = self._topics[name] = TopicState(
                name=name,
                layout=layout,
                target=TargetNode(
                    self._zk, layout, self._id, takeover_after=self._rebalance_timeout
                ),
            )
        return state

    async def prepare(self, states: list[TopicState] | None = None) -> None:
        """The parents of the owner, offset and fence nodes of ``states`` (None: of every topic
        known) exist."""
        if states is None:
            states = list(self._topics.values())
        await gather(functools.partial(self._prepare_topic, state) for state in states)

    async def _prepare_topic(self, state: TopicState) -> None:
        if not state.prepared:
            layout = state.layout
            paths = (layout.owners, layout.offsets, layout.fences)
            await gather(functools.partial(self._zk.ensure_path, path) for path in paths)
            state.prepared = True

    async def check_exists(self) -> None:
        """A member that may not wait for its topics learns their partitions now.

        Raises:
            ConfigurationError: a topic does not exist.
        """
        if not self._wait_for_topic:
            # Asked at once: each topic's first look-up makes the member's Kafka client follow
            # it, and asked together they share one metadata refresh (asked in turn, each refresh
            # would ask every topic before it again). The first failure in order is raised.
            states = list(self._topics.values())
            found = await settle(functools.partial(self._partitions_of, s) for s in states)
            for state, partitions in zip(states, found, strict=True):
                if isinstance(partitions, Exception):
                    raise partitions
                state.partitions = partitions

    async def current(self) -> list[TopicState]:
        """The states of the topics this member reads now (a pattern's follow the cluster's),
        their parent nodes made sure of."""
        if self._subscription.is_pattern:
            if self._cluster is None:
                await self._list_topics()
            names = self._subscription.select(self._cluster or {})
        else:
            names = list(self._subscription.topics)
        states = [self._topic(name) for name in names]
        await self.prepare(states)
        return states

    async def check(
        self,
        asks: Callable[[str], bool],
        changed: Callable[[], None],
        moves: Callable[[TopicState], bool] = lambda _state: False,
    ) -> None:
        """Call ``changed`` when the topics read or their partitions changed, or the racks of
        their replicas did where that ``moves`` partitions (a reassignment that moves nothing
        costs no rebalance); ``asks`` tells whether this member asks Kafka for a topic's
        partitions (a pattern's come with the listing of the topics, which every pattern member
        makes)."""
        if self._subscription.is_pattern and await self._list_topics():
            changed()
        for state in list(self._topics.values()):
            if not asks(state.name):
                continue
            replicas = state.replicas
            partitions = await self._partitions_of(state)
            if partitions != state.partitions:
                log.info("topic %r now has partitions %s", state.name, partitions)
                state.partitions = partitions
                changed()
            elif replicas is not None and state.replicas != replicas and moves(state):
                log.info("topic %r: its replicas' racks changed", state.name)
                changed()

    async def refresh(self, state: TopicState) -> None:
        """Ask Kafka for the topic's partitions; a passing failure keeps those known."""
        try:
            partitions = await self._partitions_of(state)
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

    async def _partitions_of(self, state: TopicState) -> list[int]:
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
        state.replicas = self._fetcher.placement(state.name)
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
        again = await gather(functools.partial(self._still_there, t, before[t]) for t in missing)
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

    async def retire(self) -> None:
        """Forget the topics a pattern no longer reads (deleted, or renamed out of it): their
        partitions were released by the rebalance; the target node of a deleted topic goes
        with it (deleted by the member that led it, unless written again since)."""
        if not self._subscription.is_pattern:
            return
        reading = set(self._subscription.select(self._cluster or {}))
        for name in sorted(set(self._topics) - reading):
            state = self._topics.pop(name)
            state.target.close()
            self._fetcher.forget(name)
            if state.leading and name not in (self._cluster or {}):
                if await state.target.delete():
                    log.info("member %s: topic %r is gone; its target deleted", self._id, name)
                else:
                    log.info(
                        "member %s: topic %r is gone; its target, written since, stays",
                        self._id,
                        name,
                    )

    def close(self) -> None:
        """The member closed: stop watching the topics' target nodes."""
        for state in self._topics.values():
            state.target.close()
