"""Statistics: an immutable snapshot of where one member stands, cheap enough for a health check.

The figures come from what the member knows, plus one ListOffsets round trip for the log-end
offsets of its claimed partitions (`snapshot()` takes them).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from ..kafka.topics import PartitionKey, PartitionT
from .delivery.claims import UNPOSITIONED, Claim
from .lifecycle import GroupState

if TYPE_CHECKING:
    from .assembly import Parts
    from .processing.processor import Processor

__all__ = ["GroupStatistics", "PartitionStatistics", "lag", "partition_statistics", "snapshot"]

P = TypeVar("P")
"""How the facade names a partition for its user."""


@dataclass(frozen=True)
class PartitionStatistics(Generic[PartitionT]):
    """Where one claimed partition stands.

    Attributes:
        partition: the partition id (a [TopicPartition][aio_cluster.TopicPartition] in a group
            on many topics).
        stored: the offset stored in ZooKeeper, or None when none is.
        position: the next offset to hand out (None before the claim is positioned).
        end: the log-end offset (the offset the next record written will get).
        lag: records not yet committed, by `lag()`: ``end - stored``, or ``end`` minus the
            earliest offset (as of the claim) where none is stored; never below 0.
        paused: True when the partition is paused (by this member's `pause()` or
            ``on_failure="stop"``).
        operator_paused: True while an operator paused it for the whole group
            (``aio-cluster pause``, the dashboard): it hands out nothing until both let go.
    """

    partition: PartitionT
    stored: int | None
    position: int | None
    end: int
    lag: int
    paused: bool
    operator_paused: bool = False


@dataclass(frozen=True)
class GroupStatistics(Generic[PartitionT]):
    """A snapshot of one member (see [statistics()][aio_cluster.ConsumerGroup.statistics]).

    Attributes:
        member_id: the member's id.
        state: the member's lifecycle state.
        session: the ZooKeeper session's state: ``connected``, ``suspended``, ``lost``, ``closed``.
        claimed: the claimed partitions, sorted.
        paused: the paused partitions, sorted.
        partitions: one entry per claimed partition, sorted by partition.
        rebalances: rebalances finished since the member joined.
        claim_timeouts: claims not made within ``claim_timeout``.
        unowned_nodes: of those, the claims given up on an owner node that no registered
            member's session holds (left by a tool or a stranger: nobody releases it, delete it).
        batches: batches handed out.
        records: records handed out.
        last_rebalance: seconds the last finished rebalance took, None before the first.
        recent_rebalances: seconds each of the last (at most 100) finished rebalances took,
            oldest first: with ``rebalances``, what a histogram of them needs.
        in_flight: records `process()` started and did not finish yet (in a handler, waiting
            for a retry, or being written to the dead-letter topic).
        retried: handler runs of `process()` that were retries.
        dead_lettered: records `process()` wrote to the dead-letter topic.
        oldest_in_flight: seconds since the oldest record in flight started, None when none is.
        stopped: partitions `process()` paused after a record failed for good
            (``on_failure="stop"``), sorted; they stay here until resumed.
        operator_paused: the claimed partitions an operator paused for the whole group
            (``aio-cluster pause``, the dashboard), sorted.
        skips_applied: operators' skips this member applied.
        oldest_running: seconds the oldest handler of `process()` / `process_bulk()` (a record
            from its first attempt until it finished) or batch body of ``async for`` (from its
            hand-out until the body ended) has run; None when none runs.
        stuck: the partitions whose oldest handler or batch body has run past ``stuck_after``,
            sorted: each is published for ``aio-cluster describe`` and ``check`` (its ``stuck``
            verdict) while it stays so.
        stuck_for: ``oldest_running`` while any partition is stuck, else None.
        unreadable: the partitions this member marked unreadable in ZooKeeper (no progress
            reading them for half ``fetch_timeout``; see docs/operating.md), sorted: those
            the group can give to another member go there; it probes the rest until they read
            again.
        unreadable_since: the earliest last progress of those (Unix seconds), None when none.
        unreadable_error: the last fetch error seen on them (or a timeout's description), None
            when none.
        fetched_bytes: broker node id -> the record bytes fetched from it since the member
            started: with a ``rack``, how much it read from the brokers of its own rack.
    """

    member_id: str
    state: GroupState
    session: str
    claimed: tuple[PartitionT, ...]
    paused: tuple[PartitionT, ...]
    partitions: tuple[PartitionStatistics[PartitionT], ...]
    rebalances: int
    claim_timeouts: int
    unowned_nodes: int
    batches: int
    records: int
    last_rebalance: float | None
    recent_rebalances: tuple[float, ...] = ()
    in_flight: int = 0
    retried: int = 0
    dead_lettered: int = 0
    oldest_in_flight: float | None = None
    stopped: tuple[PartitionT, ...] = ()
    operator_paused: tuple[PartitionT, ...] = ()
    skips_applied: int = 0
    oldest_running: float | None = None
    stuck: tuple[PartitionT, ...] = ()
    stuck_for: float | None = None
    unreadable: tuple[PartitionT, ...] = ()
    unreadable_since: float | None = None
    unreadable_error: str | None = None
    fetched_bytes: Mapping[int, int] = field(default_factory=dict)

    @property
    def lag(self) -> int:
        """The lag summed over the claimed partitions."""
        return sum(partition.lag for partition in self.partitions)


def lag(end: int, committed: int | None, earliest: int | None) -> int:
    """The records a group has still to read in one partition: one rule for `statistics()` and
    ``aio-cluster describe``.

    The log end minus the committed offset, or minus the earliest offset where none is committed
    (a member starts there); never below 0: an offset committed past the log end (set by hand,
    or the topic was made again) leaves nothing to read until the log grows past it.

    Args:
        end: the log-end offset.
        committed: the offset stored for the group, or None.
        earliest: the earliest offset the broker holds (None: unknown, taken as 0).
    """
    start = committed if committed is not None else (earliest or 0)
    return max(end - start, 0)


def partition_statistics(
    claims: Mapping[PartitionKey, Claim],
    ends: Mapping[PartitionKey, int],
    paused: list[PartitionKey],
    name: Callable[[PartitionKey], PartitionT] | None = None,
    held: Collection[PartitionKey] = (),
) -> tuple[PartitionStatistics[PartitionT], ...]:
    """The per-partition figures of the claims that have a known log end.

    Args:
        claims: the member's claims (by partition key).
        ends: partition key -> log-end offset.
        paused: the paused partitions' keys.
        name: how the user knows a partition key (None: the key is the partition id).
        held: the keys of the partitions an operator paused.
    """
    figures = []
    for partition in sorted(claims.keys() & ends.keys()):
        claim = claims[partition]
        end = ends[partition]
        figures.append(
            PartitionStatistics(
                partition=cast(PartitionT, partition) if name is None else name(partition),
                stored=claim.stored,
                position=None if claim.next_offset == UNPOSITIONED else claim.next_offset,
                end=end,
                lag=lag(end, claim.stored, claim.earliest),
                paused=partition in paused,
                operator_paused=partition in held,
            )
        )
    return tuple(figures)


async def snapshot(
    parts: Parts,
    state: GroupState,
    processor: Processor | None,
    name: Callable[[PartitionKey], P],
) -> GroupStatistics[P]:
    """A snapshot of a member, its partitions named by ``name``; one ListOffsets round trip to
    Kafka.

    Args:
        parts: the member's parts.
        state: where the member is in its life.
        processor: the processor of its running (or its last) ``process()`` call, if any.
        name: how the user knows a partition key.
    """

    def names(keys: Iterable[PartitionKey]) -> tuple[P, ...]:
        named: list[Any] = [name(key) for key in keys]
        return tuple(sorted(named))

    states = parts.states
    claims, paused = states.claims, states.paused
    held = [key for key in states.held if key in claims]
    marked = parts.marker.marked
    # The leaders of the partitions marked unreadable may not answer: their log ends are the
    # last a fetch saw, so that the snapshot says what the member cannot read instead of
    # waiting out a request timeout.
    ends = await parts.fetcher.ends(sorted(claims.keys() - marked.keys()))
    for key in claims.keys() & marked.keys():
        if (seen := parts.fetcher.highwater(key)) is not None:
            ends[key] = seen
    figures = partition_statistics(claims, ends, paused, name, held)
    membership = parts.membership
    stuck, oldest = parts.stuck.stuck(), parts.stuck.oldest()
    return GroupStatistics(
        member_id=parts.id,
        state=state,
        session=parts.zk.state.value,
        claimed=names(claims),
        paused=names(paused),
        partitions=tuple(sorted(figures, key=lambda entry: cast(Any, entry.partition))),
        rebalances=membership.rebalances,
        claim_timeouts=membership.claim_timeouts,
        unowned_nodes=membership.unowned_nodes,
        batches=states.batches,
        records=states.records,
        last_rebalance=membership.last_rebalance,
        recent_rebalances=tuple(membership.recent_rebalances),
        in_flight=0 if processor is None else processor.in_flight,
        retried=0 if processor is None else processor.retried,
        dead_lettered=0 if processor is None else processor.dead_lettered,
        oldest_in_flight=None if processor is None else processor.oldest_in_flight(),
        stopped=()
        if processor is None
        else names(p for p in processor.failed_at if p in claims and p in paused),
        operator_paused=names(held),
        skips_applied=parts.controls.applied,
        oldest_running=oldest,
        stuck=names(stuck),
        stuck_for=oldest if stuck else None,
        unreadable=names(marked),
        unreadable_since=min((why.since for why in marked.values()), default=None),
        unreadable_error=max(marked.values(), key=lambda why: why.since).error if marked else None,
        fetched_bytes=dict(parts.fetcher.fetched),
    )
