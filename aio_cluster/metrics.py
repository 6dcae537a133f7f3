"""A member's figures for Prometheus: lag, offsets, throughput, rebalances and the session.

Needs ``prometheus_client`` (``pip install 'aio-cluster[metrics]'``). One
[GroupMetrics][aio_cluster.metrics.GroupMetrics] reads the
[statistics()][aio_cluster.ConsumerGroup.statistics] of the members it is given and exposes
them through a ``prometheus_client`` registry; refresh it before each scrape, or keep a
refreshing task running::

    metrics = GroupMetrics(group)                    # registered in prometheus_client's REGISTRY

    @app.get("/metrics")
    async def scrape() -> Response:
        await metrics.refresh()                      # one statistics() per member
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    # or, with prometheus_client's own server (a thread): refresh in the background
    start_http_server(9100)
    tasks.start_soon(metrics.run, 5.0)

The series, every one labelled with ``group`` and ``member``; those per partition also with
the partition's own ``topic`` and ``partition``, so that a member on many topics (a list, a
pattern) has one series per partition of each, and every ``topic`` label is one topic's name.
The member's own figures carry no ``topic``: they count the member as a whole, whatever it
reads, and summing them over a group counts each record, batch and rebalance once. Its claimed
partitions per topic are ``count by (group, topic) (aio_cluster_partition_end_offset)``::

    aio_cluster_partition_lag                    gauge      records not yet committed
    aio_cluster_partition_stored_offset          gauge      the offset stored in ZooKeeper
    aio_cluster_partition_position               gauge      the next offset to hand out
    aio_cluster_partition_end_offset             gauge      the log-end offset
    aio_cluster_partition_paused                 gauge      1 while paused (pause(), on_failure)
    aio_cluster_partition_operator_paused        gauge      1 while an operator paused it
    aio_cluster_skips_applied_total              counter    operators' skips the member applied
    aio_cluster_claimed_partitions               gauge      how many partitions the member owns
    aio_cluster_unreadable_partitions            gauge      partitions it marked unreadable
    aio_cluster_unreadable_seconds               gauge      since when it cannot read them (0: none)
    aio_cluster_records_total                    counter    records handed out
    aio_cluster_batches_total                    counter    batches handed out
    aio_cluster_rebalances_total                 counter    rebalances finished
    aio_cluster_claim_timeouts_total             counter    claims not made within claim_timeout
    aio_cluster_unowned_nodes_total              counter    of those, given up on a node nobody owns
    aio_cluster_processing_in_flight             gauge      records process() started, not finished
    aio_cluster_processing_oldest_seconds        gauge      age of the oldest record in flight
    aio_cluster_processing_retries_total         counter    handler runs that were retries
    aio_cluster_dead_letters_total               counter    records written to the dead-letter topic
    aio_cluster_rebalance_duration_seconds       histogram  how long each rebalance took
    aio_cluster_session_state{state=...}         gauge      1 for the ZooKeeper session's state
    aio_cluster_member_state{state=...}          gauge      1 for the member's lifecycle state
    aio_cluster_partition_stuck                  gauge      1 while its handler or body is stuck
    aio_cluster_oldest_running_seconds           gauge      age of the oldest handler or body
    aio_cluster_stuck                            gauge      1 while a partition of it is stuck

A member's counters start at 0 when it joins (its id is new each time), which Prometheus's
``rate()`` and ``increase()`` take as a counter reset. A closed member's series disappear.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import AioClusterError, ConfigurationError
from .group import ConsumerGroup, TopicPartition
from .member.lifecycle import GroupState
from .member.statistics import GroupStatistics

try:
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
    from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry
except ImportError:  # pragma: no cover - depends on the installation
    raise ConfigurationError(
        "aio_cluster.metrics needs prometheus_client: pip install 'aio-cluster[metrics]'"
    ) from None

__all__ = ["DEFAULT_BUCKETS", "GroupMetrics"]

log = logging.getLogger(__name__)

DEFAULT_BUCKETS: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""The rebalance duration histogram's upper bounds in seconds: a quiet rebalance takes tens of
milliseconds, one that waits for a previous owner's claim up to ``claim_timeout``."""

_SESSION_STATES = ("connected", "suspended", "lost", "closed")
_MEMBER = ("group", "member")
"""The labels of a member's own figures: no topic, since they count the member as a whole."""
_PARTITION = ("group", "topic", "partition", "member")
"""The labels of a partition's figures: the topic is the partition's own."""


@dataclass
class _Member:
    """What is known of one member: its last snapshot and its rebalance histogram so far."""

    group: ConsumerGroup[Any]
    snapshot: GroupStatistics[Any] | None = None
    rebalances_seen: int = 0
    buckets: list[int] = field(default_factory=list)
    """Per upper bound, the rebalances that took at most that long (cumulative)."""
    observed: int = 0
    duration_sum: float = 0.0

    def observe(self, snapshot: GroupStatistics[Any], bounds: Sequence[float]) -> None:
        """Take a new snapshot; count the rebalances that finished since the last one."""
        new = snapshot.rebalances - self.rebalances_seen
        durations = snapshot.recent_rebalances[-new:] if new > 0 else ()
        for duration in durations:
            self.observed += 1
            self.duration_sum += duration
            for index, bound in enumerate(bounds):
                if duration <= bound:
                    self.buckets[index] += 1
        # More rebalances than the snapshot remembers (over 100 between two refreshes) are
        # counted by the counter, not observed by the histogram: its count says so.
        self.rebalances_seen = snapshot.rebalances
        self.snapshot = snapshot


class GroupMetrics(Collector):
    """A ``prometheus_client`` collector of the figures of one or more members.

    Scrapes read the snapshots taken by the last `refresh()`; a member that has not been
    refreshed yet shows nothing. Register one per registry: two would expose the same series.
    """

    def __init__(
        self,
        *groups: ConsumerGroup[Any],
        registry: CollectorRegistry | None = REGISTRY,
        buckets: Sequence[float] = DEFAULT_BUCKETS,
    ) -> None:
        """Collect the figures of ``groups`` (more can be added with `add()`).

        Args:
            groups: the members to expose.
            registry: where to register; None registers nowhere (call ``registry.register``).
            buckets: the rebalance duration histogram's upper bounds in seconds, ascending.

        Raises:
            ConfigurationError: the buckets are empty, not positive or not ascending.
        """
        bounds = [float(bound) for bound in buckets]
        if not bounds or bounds[0] <= 0 or sorted(set(bounds)) != bounds:
            raise ConfigurationError(
                f"buckets must be positive and strictly ascending, not {list(buckets)!r}"
            )
        self._bounds = bounds
        self._members: list[_Member] = []
        for group in groups:
            self.add(group)
        self._registry = registry
        if registry is not None:
            registry.register(self)

    def add(self, group: ConsumerGroup[Any]) -> None:
        """Expose one more member's figures (from the next `refresh()` on)."""
        if all(known.group is not group for known in self._members):
            self._members.append(_Member(group, buckets=[0] * len(self._bounds)))

    def unregister(self) -> None:
        """Leave the registry given at construction (a no-op without one)."""
        if self._registry is not None:
            self._registry.unregister(self)
            self._registry = None

    async def refresh(self) -> None:
        """Take a snapshot of each member: one ``statistics()`` call (one ListOffsets round trip
        to Kafka) each. A member that cannot answer keeps its last snapshot (logged); a closed
        one is dropped from the output.
        """
        for member in self._members:
            if member.group.state is GroupState.CLOSED:
                member.snapshot = None
                continue
            try:
                snapshot = await member.group.statistics()
            except AioClusterError as exc:
                log.warning("metrics of member %s not refreshed: %s", member.group.id, exc)
                continue
            member.observe(snapshot, self._bounds)

    async def run(self, interval: float = 5.0) -> None:
        """`refresh()` every ``interval`` seconds until cancelled: for scrapes that cannot await
        it (``prometheus_client.start_http_server`` serves from a thread).

        Raises:
            ConfigurationError: ``interval`` is not positive.
        """
        if not interval > 0:
            raise ConfigurationError(f"interval must be positive, not {interval!r}")
        while True:
            await self.refresh()
            await asyncio.sleep(interval)

    def describe(self) -> Iterable[Metric]:
        """The families this collector exposes, so that a registry can refuse duplicates."""
        return list(self._families())

    def collect(self) -> Iterable[Metric]:
        """The families with the samples of the last snapshots (called on each scrape)."""
        return list(self._families())

    def _families(self) -> Iterator[Metric]:
        lag = GaugeMetricFamily(
            "aio_cluster_partition_lag",
            "Records of a claimed partition not yet committed (log end minus stored offset).",
            labels=_PARTITION,
        )
        stored = GaugeMetricFamily(
            "aio_cluster_partition_stored_offset",
            "The offset a claimed partition has stored in ZooKeeper (absent where none is).",
            labels=_PARTITION,
        )
        position = GaugeMetricFamily(
            "aio_cluster_partition_position",
            "The next offset the member hands out of a claimed partition.",
            labels=_PARTITION,
        )
        end = GaugeMetricFamily(
            "aio_cluster_partition_end_offset",
            "The log-end offset of a claimed partition.",
            labels=_PARTITION,
        )
        paused = GaugeMetricFamily(
            "aio_cluster_partition_paused",
            "1 while the claimed partition is paused.",
            labels=_PARTITION,
        )
        held = GaugeMetricFamily(
            "aio_cluster_partition_operator_paused",
            "1 while an operator paused the claimed partition for the group (aio-cluster pause).",
            labels=_PARTITION,
        )
        skips = CounterMetricFamily(
            "aio_cluster_skips_applied",
            "Operators' skips (aio-cluster skip) the member applied.",
            labels=_MEMBER,
        )
        claimed = GaugeMetricFamily(
            "aio_cluster_claimed_partitions",
            "How many partitions the member owns.",
            labels=_MEMBER,
        )
        unreadable = GaugeMetricFamily(
            "aio_cluster_unreadable_partitions",
            "Partitions the member marked unreadable (no progress for half fetch_timeout).",
            labels=_MEMBER,
        )
        unreadable_for = GaugeMetricFamily(
            "aio_cluster_unreadable_seconds",
            "Seconds since the member last read the partitions it marked (0 when none).",
            labels=_MEMBER,
        )
        records = CounterMetricFamily(
            "aio_cluster_records", "Records handed out by the member.", labels=_MEMBER
        )
        batches = CounterMetricFamily(
            "aio_cluster_batches", "Batches handed out by the member.", labels=_MEMBER
        )
        rebalances = CounterMetricFamily(
            "aio_cluster_rebalances", "Rebalances the member finished.", labels=_MEMBER
        )
        timeouts = CounterMetricFamily(
            "aio_cluster_claim_timeouts",
            "Claims not made within claim_timeout (a previous owner held on).",
            labels=_MEMBER,
        )
        unowned = CounterMetricFamily(
            "aio_cluster_unowned_nodes",
            "Claims given up on an owner node that no registered member holds.",
            labels=_MEMBER,
        )
        in_flight = GaugeMetricFamily(
            "aio_cluster_processing_in_flight",
            "Records process() started and did not finish yet.",
            labels=_MEMBER,
        )
        oldest = GaugeMetricFamily(
            "aio_cluster_processing_oldest_seconds",
            "Seconds since the oldest record in flight in process() started (0 when none).",
            labels=_MEMBER,
        )
        retries = CounterMetricFamily(
            "aio_cluster_processing_retries",
            "Handler runs of process() that were retries.",
            labels=_MEMBER,
        )
        dead_letters = CounterMetricFamily(
            "aio_cluster_dead_letters",
            "Records process() wrote to the dead-letter topic.",
            labels=_MEMBER,
        )
        durations = HistogramMetricFamily(
            "aio_cluster_rebalance_duration_seconds",
            "How long the member's rebalances took.",
            labels=_MEMBER,
        )
        session = GaugeMetricFamily(
            "aio_cluster_session_state",
            "1 for the state of the member's ZooKeeper session, 0 for the others.",
            labels=(*_MEMBER, "state"),
        )
        lifecycle = GaugeMetricFamily(
            "aio_cluster_member_state",
            "1 for the member's lifecycle state, 0 for the others.",
            labels=(*_MEMBER, "state"),
        )
        now = time.time()
        for member in self._members:
            snapshot = member.snapshot
            if snapshot is None:
                continue
            group = member.group
            who = [group.name, snapshot.member_id]
            for figures in snapshot.partitions:
                # A member on one topic names a partition by its id, on many by TopicPartition.
                topic, partition = (
                    figures.partition
                    if isinstance(figures.partition, TopicPartition)
                    else (group.topics[0], figures.partition)
                )
                labels = [group.name, topic, str(partition), snapshot.member_id]
                lag.add_metric(labels, figures.lag)
                if figures.stored is not None:
                    stored.add_metric(labels, figures.stored)
                if figures.position is not None:
                    position.add_metric(labels, figures.position)
                end.add_metric(labels, figures.end)
                paused.add_metric(labels, 1 if figures.paused else 0)
                held.add_metric(labels, 1 if figures.operator_paused else 0)
            claimed.add_metric(who, len(snapshot.claimed))
            unreadable.add_metric(who, len(snapshot.unreadable))
            since = snapshot.unreadable_since
            unreadable_for.add_metric(who, 0.0 if since is None else max(0.0, now - since))
            records.add_metric(who, snapshot.records)
            batches.add_metric(who, snapshot.batches)
            rebalances.add_metric(who, snapshot.rebalances)
            timeouts.add_metric(who, snapshot.claim_timeouts)
            unowned.add_metric(who, snapshot.unowned_nodes)
            in_flight.add_metric(who, snapshot.in_flight)
            oldest.add_metric(who, snapshot.oldest_in_flight or 0.0)
            retries.add_metric(who, snapshot.retried)
            dead_letters.add_metric(who, snapshot.dead_lettered)
            skips.add_metric(who, snapshot.skips_applied)
            buckets = [(repr(b), n) for b, n in zip(self._bounds, member.buckets, strict=True)]
            buckets.append(("+Inf", member.observed))
            durations.add_metric(who, buckets, member.duration_sum)
            for name in _SESSION_STATES:
                session.add_metric([*who, name], 1 if snapshot.session == name else 0)
            for stage in GroupState:
                lifecycle.add_metric([*who, stage.value], 1 if snapshot.state is stage else 0)
        yield from (lag, stored, position, end, paused, claimed)
        yield from (records, batches, rebalances, timeouts, unowned, durations, session, lifecycle)
        yield from (in_flight, oldest, retries, dead_letters, held, skips)
        yield from (unreadable, unreadable_for)
        yield from self._stuck_families()

    def _stuck_families(self) -> Iterator[Metric]:
        """The series of handlers and batch bodies that run past ``stuck_after``."""
        partition_stuck = GaugeMetricFamily(
            "aio_cluster_partition_stuck",
            "1 while the oldest handler or batch body of the partition has run past stuck_after.",
            labels=_PARTITION,
        )
        running = GaugeMetricFamily(
            "aio_cluster_oldest_running_seconds",
            "Seconds the member's oldest handler or batch body has run (0 when none runs).",
            labels=_MEMBER,
        )
        stuck = GaugeMetricFamily(
            "aio_cluster_stuck",
            "1 while a handler or batch body of the member has run past stuck_after.",
            labels=_MEMBER,
        )
        for member in self._members:
            snapshot = member.snapshot
            if snapshot is None:
                continue
            group = member.group
            who = [group.name, snapshot.member_id]
            # Its claimed partitions, 0 or 1, and any stuck one it no longer claims (a handler
            # that ignored its cancellation at a handover).
            stuck_ones = set(snapshot.stuck)
            for name in dict.fromkeys([*snapshot.claimed, *snapshot.stuck]):
                topic, partition = (
                    name if isinstance(name, TopicPartition) else (group.topics[0], name)
                )
                labels = [group.name, topic, str(partition), snapshot.member_id]
                partition_stuck.add_metric(labels, 1 if name in stuck_ones else 0)
            running.add_metric(who, snapshot.oldest_running or 0.0)
            stuck.add_metric(who, 1 if snapshot.stuck else 0)
        yield from (partition_stuck, running, stuck)
