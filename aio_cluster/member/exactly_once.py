"""Exactly once: what a member of an ``exactly_once`` group writes to Kafka and the input offsets
it consumed, committed together in one Kafka transaction per partition.

Each claimed partition has a transactional producer of its own
(`aio_cluster.kafka.transactions.PartitionProducer`). It is started while the claim is taken,
before the partition's first batch is handed out (`Transactions.claim()`): that fences the
previous owner's producer. Only then is the group's committed Kafka offset read: it is the
partition's start, and the ZooKeeper offset node follows it (a node ahead is corrected down).

What a batch's body or a record's handler sends goes into an `Output`, kept in memory: a body
that raises or breaks, or a handler attempt that fails, drops its sends. The sends of records
that finished are kept by the input offset they came from; the partition's completed offset
(a batch's end, or `process()`'s completed prefix) is ``ready`` (see
`aio_cluster.member.delivery.commits`), and a commit (`Transactions.commit()`) writes the kept
sends of the records below it, in offset order, and the offset, in one transaction. Records finished
beyond the prefix keep their sends for a later transaction, so a transaction only ever carries
the output of inputs below the offset it commits. Only a committed offset becomes pending for
ZooKeeper, which so never runs ahead of Kafka.

A send Kafka refuses for good (a record without a key to a compacted topic, say) aborts its
transaction (`aio_cluster.kafka.transactions.Refusals`) and gives the partition up as a failed
commit does (below): neither the output nor the offset past its input is committed. Kafka refuses
a record batch whole, so the refusal names every input whose output shared a batch with the bad
one; the member remembers them (`_Refusal`). When they are handled again, each of them commits in
a transaction of its own, which tells the bad one apart; an input refused alone, handled again
with the same output, is a failed attempt of its record (`OutputRefusedError`), for its
``on_failure`` to decide. ``transactions()`` raises the error instead.

A commit under way is shielded from cancellations (closing `process_transactional()` cancels
its commits' task): cut short, it would leave its transaction open, which holds
``read_committed`` readers of its outputs back until the broker times it out (60 s) or the
partition's next owner starts its producer. A commit that fails, or is cancelled all the same
from outside anyio, is aborted.

A commit that Kafka fences (a newer owner started the partition's producer) gives the partition
up: its claim is marked gone (`aio_cluster.member.delivery.commits.Commits.fenced_off`)
and the next rebalance drops it. A commit that fails otherwise does the same, after which the
rebalance claims the partition again when the assignment still gives it here: the new producer's
start aborts the open transaction, and the partition is read again from the offset Kafka
committed last.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio

from ..concurrency import settle
from ..errors import (
    BrokerError,
    ConfigurationError,
    OutputRefusedError,
    ProducerFencedError,
    TransactionClosedError,
    TransactionDeniedError,
)
from ..kafka.diagnosis import named
from ..kafka.group_offsets import KafkaGroupOffsets
from ..kafka.records import Record
from ..kafka.topics import PartitionKey
from ..kafka.transactions import (
    PartitionProducer,
    Refusals,
    Send,
    denial,
    denied_message,
    transactional_id,
)
from .delivery.claims import Claim
from .delivery.partitions import PartitionStates
from .protocol.keyed_layout import KeyedLayout

__all__ = ["Output", "TransactionalHandler", "Transactions"]

log = logging.getLogger(__name__)

TransactionalHandler = Callable[[Record, "Output"], Awaitable[object]]
"""``async def handler(record, output)``: what `process_transactional()` runs."""

STARTING = 16
"""The most producers a member starts at once (each start is a few round trips to Kafka)."""


class Output:
    """Where a batch's body (``transactions()``) or a record's handler
    (``process_transactional()``) writes its output: what it sends is written to Kafka in the
    transaction that commits the input it came from, or never.

    An Output belongs to one batch, or one attempt of one record's handler: once that ended it
    refuses sends (`TransactionClosedError`).
    """

    __slots__ = ("_check", "_closed", "_fenced", "_partition", "_sends")

    def __init__(
        self,
        fenced: Callable[[], bool],
        partition: int,
        check: Callable[[Send], Awaitable[None]] | None = None,
    ) -> None:
        """Args:
        fenced: whether the input partition's producer is known to be fenced.
        partition: the input partition (named in the error).
        check: refuses a send that could never be written (the producer's
            `aio_cluster.kafka.transactions.PartitionProducer.check()`).
        """
        self._sends: list[Send] = []
        self._closed = False
        self._fenced = fenced
        self._partition = partition
        self._check = check

    async def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes]] | None = None,
        partition: int | None = None,
    ) -> None:
        """Write a record to ``topic`` in the input partition's next transaction. It is kept in
        memory until that commits (when the batch's body completed, or at the next commit
        interval once the record and all before it finished).

        Args:
            topic: the topic to write to.
            value: the record's value (bytes, or None for a tombstone).
            key: the record's key, which picks its partition unless ``partition`` is given.
            headers: the record's headers, ``(name, bytes)`` pairs.
            partition: the partition to write to (default: by key, as Kafka's producers do).

        Raises:
            TransactionClosedError: the batch or the handler attempt this Output belongs to
                ended.
            ProducerFencedError: a newer owner took the input partition over: nothing sent
                here will be committed.
            ConfigurationError: the topic is not a non-empty string; the value, key or
                headers are not bytes; the value and the key are both None; the partition is
                not one of the topic's; the record is larger than the producer's request bound
                (1 MiB).
            BrokerError: with ``partition``, the topic's partitions could not be learned.
        """
        if self._closed:
            raise TransactionClosedError(
                "this Output's batch (or record attempt) ended: its transaction is closed"
            )
        if self._fenced():
            raise ProducerFencedError(
                f"input partition {self._partition} was taken over by a newer owner: its "
                "transaction is dead",
                self._partition,
            )
        _check_send(topic, value, key, headers, partition)
        if headers is not None:
            headers = list(headers)
        send = Send(topic, value, key, headers, partition)
        if self._check is not None:
            await self._check(send)
        self._sends.append(send)

    def close(self) -> list[Send]:
        """End the Output: what it was sent, in order; it refuses sends from now on."""
        self._closed = True
        sends, self._sends = self._sends, []
        return sends


@dataclass(eq=False)
class _Partition:
    """One claimed partition's producer, and the sends kept for its next transactions."""

    producer: PartitionProducer
    kept: dict[int, list[Send]] = field(default_factory=dict)
    """Input offset -> the sends of the finished input (a batch's: its first offset) not yet
    committed."""
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    """Held by a commit and by the release: one transaction of the partition at a time."""


@dataclass(frozen=True, slots=True)
class _Refusal:
    """An input whose output Kafka refused."""

    error: OutputRefusedError
    sends: list[Send] | None
    """What the input sent, when its output was refused alone; None when it shared a record
    batch with others (a suspect: it commits alone next time, which tells)."""


class Transactions:
    """A member's transactional producers, one per claimed partition, and their commits (see
    the module)."""

    def __init__(
        self,
        brokers: str | Sequence[str],
        layout: KeyedLayout,
        states: PartitionStates,
        *,
        member_id: str,
        timeout: float,
        options: Mapping[str, Any] | None,
        on_fenced: Callable[[list[PartitionKey]], None],
    ) -> None:
        """Args:
        brokers: Kafka's servers.
        layout: the group's paths and partition keys.
        states: the member's partition states (transactional).
        member_id: named in the producers' client ids and in log messages.
        timeout: the bound, in seconds, on each producer's start and each commit.
        options: Kafka connection options.
        on_fenced: called with the partitions given up (their claims marked gone): a
            rebalance drops them.
        """
        self._brokers = brokers
        self._layout = layout
        self._keys = layout.keys
        self._states = states
        self._id = member_id
        self._timeout = timeout
        self._options = options
        self._on_fenced = on_fenced
        self._offsets = KafkaGroupOffsets(
            brokers, layout.group, layout.keys, client_id=member_id, options=options
        )
        self._partitions: dict[PartitionKey, _Partition] = {}
        self._refused: dict[PartitionKey, dict[int, _Refusal]] = {}
        """Input offset -> the refusal of its output, per partition, until an offset past it
        commits or the claim ends otherwise than by the refusal's giving up."""
        self._refusing: set[PartitionKey] = set()
        """The partitions given up for a refusal: their next release keeps their refusals, for
        the claim taken again (any other release forgets them: an operator's reset, a
        handover)."""
        self._starting = anyio.Semaphore(STARTING)

    @property
    def producers(self) -> int:
        """How many producers the member holds: started, or not yet stopped for good."""
        return len(self._partitions)

    async def start(self) -> None:
        """Connect the reader of the group's committed offsets.

        Raises:
            BrokerError: no broker answered.
        """
        await self._offsets.start()

    async def stop(self) -> None:
        """Close every producer (their open transactions are aborted by the next owners),
        finishing the stops cut short before, and the offsets' reader. Never raises."""
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as stopping:
                for partition, entry in list(self._partitions.items()):
                    stopping.start_soon(self._stop, partition, entry)
        self._refused.clear()
        self._refusing.clear()
        try:
            await self._offsets.stop()
        except Exception as exc:
            log.warning("member %s: closing the offsets' reader failed: %r", self._id, exc)

    async def _stop(self, partition: PartitionKey, entry: _Partition) -> None:
        """Stop a producer; it leaves the table once its stop completed (one cut short by a
        cancellation from outside anyio is finished by the next `stop()` or `release()`)."""
        await entry.producer.stop()
        if entry.producer.stopped and self._partitions.get(partition) is entry:
            del self._partitions[partition]

    # -- claims ------------------------------------------------------------------------------

    async def claim(self, partition: PartitionKey, stored: int | None) -> int | None:
        """A claim of ``partition`` is being taken: start its producer (which fences the
        previous owner's), then read the offset the group committed in Kafka.

        Returns:
            Where the claim starts: the committed Kafka offset, or ``stored`` (ZooKeeper's)
            when Kafka holds none.

        Raises:
            BrokerError: Kafka did not answer (the claim is not to be made).
            TransactionDeniedError: Kafka's ACLs refuse this principal the partition's
                transactional id, or the group.
        """
        topic, number = self._keys.split(partition)
        async with self._starting:
            old = self._partitions.get(partition)
            if old is not None:
                await self._stop(partition, old)
                if not old.producer.stopped:
                    # Kept in the table until it stopped: the next try finishes its stop.
                    raise BrokerError(
                        f"the previous producer {old.producer.id!r} did not stop in time "
                        "(trying again)"
                    )
            producer = PartitionProducer(
                self._brokers,
                self._layout.group,
                self._keys.split(partition),
                client_id=self._id,
                timeout=self._timeout,
                options=self._options,
            )
            try:
                await producer.start()
            except ProducerFencedError as exc:
                raise BrokerError(f"{exc} (while starting: trying again)") from exc
        try:
            committed = await self._offsets.committed([partition], self._timeout)
        except BaseException as exc:
            await producer.stop()
            denied = denial(exc)
            if denied is None:
                raise
            group = self._layout.group
            raise TransactionDeniedError(
                denied_message(denied, transactional_id(group, topic, number), group)
            ) from exc
        self._partitions[partition] = _Partition(producer)
        start = committed.get(partition, stored)
        if stored is not None and start != stored:
            log.info(
                "member %s: %s starts at offset %d, committed in Kafka (ZooKeeper said %d: it "
                "follows)",
                self._id,
                self._layout.label(partition),
                start,
                stored,
            )
        log.debug("member %s: producer of %s %d started", self._id, topic, number)
        return start

    async def release(self, partition: PartitionKey) -> None:
        """The claim of ``partition`` ends: stop its producer (after a commit under way). Its
        refusals are forgotten unless a refusal gave it up (see `_refusing`)."""
        if partition in self._refusing:
            self._refusing.discard(partition)
        else:
            self._refused.pop(partition, None)
        entry = self._partitions.get(partition)
        if entry is None:
            return
        async with entry.lock:
            await self._stop(partition, entry)

    async def retire(self, claimed: Collection[PartitionKey]) -> None:
        """Stop the producers of partitions no longer claimed (their claims went with a lost
        session; a new owner's start has fenced them, or will)."""
        held = set(claimed)
        stale = [partition for partition in self._partitions if partition not in held]
        async with anyio.create_task_group() as releasing:
            for partition in stale:
                releasing.start_soon(self.release, partition)

    # -- output ------------------------------------------------------------------------------

    def output(self, claim: Claim) -> Output:
        """A new `Output` for a batch or a record attempt of ``claim``."""
        entry = self._partitions.get(claim.partition)

        def fenced() -> bool:
            return claim.fenced or entry is None or entry.producer.fenced

        check = None if entry is None else entry.producer.check
        return Output(fenced, self._keys.split(claim.partition).partition, check)

    def keep(self, claim: Claim, offset: int, sends: list[Send]) -> None:
        """The input at ``offset`` of ``claim`` finished having sent ``sends``: kept for the
        transaction that commits past it (dropped when the claim ended meanwhile)."""
        if not sends or self._states.claims.get(claim.partition) is not claim:
            return
        entry = self._partitions.get(claim.partition)
        if entry is not None:
            entry.kept[offset] = sends

    def handler(self, handler: TransactionalHandler) -> Callable[[Record], Awaitable[None]]:
        """``handler`` as `process()` runs it: each attempt gets an `Output` of its own, kept
        when the attempt finished, dropped when it failed."""
        keys, claims = self._keys, self._states.claims

        async def attempt(record: Record) -> None:
            claim = claims.get(keys.key(record.topic, record.partition))
            # A record whose claim ended meanwhile: nothing it sends can commit here.
            output = self.output(claim) if claim is not None else _gone(record.partition)
            try:
                await handler(record, output)
            finally:
                sends = output.close()
            if claim is not None:
                refused = self._refused_again(claim.partition, record.offset, sends)
                if refused is not None:
                    raise refused
                self.keep(claim, record.offset, sends)

        return attempt

    def _refused_again(
        self, partition: PartitionKey, offset: int, sends: list[Send]
    ) -> OutputRefusedError | None:
        """The error of an input whose same output Kafka refused alone before; None when it
        was not, or it now sends something else (the next commit tells)."""
        refusal = self._refused.get(partition, {}).get(offset)
        if refusal is None or refusal.sends is None or refusal.sends != sends:
            return None
        error = refusal.error
        return OutputRefusedError(
            f"{error}", error.partition, error.offset, error.topic, error.error
        )

    # -- commits -----------------------------------------------------------------------------

    async def commit(self, partitions: Collection[PartitionKey], *, raising: bool = False) -> None:
        """Commit, for each of ``partitions`` whose completed offset moved, a transaction with
        the kept sends below it and the offset; a committed offset becomes pending (ZooKeeper
        follows). A partition whose commit failed is given up (see the module).

        Args:
            partitions: the partitions to commit.
            raising: raise `ProducerFencedError` for a fenced partition (else it is logged).

        Raises:
            ProducerFencedError: with ``raising``, a partition's producer was fenced.
            TransactionDeniedError: Kafka's ACLs refuse this principal the transactional id
                or the group.
        """
        due = [p for p in partitions if self._due(p)]
        if not due:
            return
        if len(due) == 1:
            await self._commit(due[0], raising)
            return
        # Each partition's commit runs to its end (a failed one gave its partition up), and the
        # first failure is raised as itself: a task group would wrap it.
        outcomes = await settle(partial(self._commit, partition, raising) for partition in due)
        for outcome in outcomes:
            if isinstance(outcome, Exception):
                raise outcome

    def _due(self, partition: PartitionKey) -> bool:
        claim = self._states.claims.get(partition)
        return (
            claim is not None
            and claim.ready is not None
            and not claim.fenced
            and partition in self._partitions
        )

    async def _commit(self, partition: PartitionKey, raising: bool) -> None:
        entry = self._partitions.get(partition)
        if entry is None:
            return
        async with entry.lock:
            claim = self._states.claims.get(partition)
            offset = None if claim is None else claim.ready
            if (
                claim is None
                or claim.fenced
                or offset is None
                or self._partitions.get(partition) is not entry
            ):
                return
            kept = entry.kept
            below = sorted(o for o in kept if o < offset)
            refusals = self._refused.get(partition, {})
            for inputs, end in _stretches(below, refusals, offset):
                try:
                    # A commit under way ends before a cancellation does (within the producer's
                    # timeout): cut short, it would leave its transaction open (see the module).
                    with anyio.CancelScope(shield=True):
                        refused = await entry.producer.commit(
                            [(o, send) for o in inputs for send in kept[o]], end
                        )
                except ProducerFencedError as exc:
                    self._give_up(claim, f"{exc}")
                    if raising:
                        raise
                    return
                except TransactionDeniedError as exc:
                    self._give_up(claim, f"{exc}")
                    raise
                except BrokerError as exc:
                    self._give_up(claim, f"{exc}; reading it again from the offset committed last")
                    return
                except BaseException:
                    # Cancelled from outside anyio mid-transaction (aborted as far as it could
                    # be): its outcome is unknown; the next claim knows.
                    self._give_up(claim, "a commit was cancelled")
                    raise
                if refused:
                    error = self._refusal(claim, refused, kept, remember=not raising)
                    if not raising:
                        self._refusing.add(partition)
                    self._give_up(
                        claim, f"{error}; reading it again from the offset committed last"
                    )
                    if raising:
                        raise error
                    return
                for o in inputs:
                    del kept[o]
                for o in [o for o in refusals if o < end]:
                    del refusals[o]
                self._states.commits.committed(claim, end)

    def _refusal(
        self, claim: Claim, refused: Refusals, kept: Mapping[int, list[Send]], *, remember: bool
    ) -> OutputRefusedError:
        """The error of a refused transaction, naming its first refused output; with
        ``remember``, the inputs whose outputs were refused are noted (see the module)."""
        firsts: dict[int, OutputRefusedError] = {}
        for offset, send, cause in refused:
            if offset not in firsts:
                firsts[offset] = self._refused_error(claim, offset, send.topic, cause)
        if remember:
            alone = len(firsts) == 1
            refusals = self._refused.setdefault(claim.partition, {})
            for offset, error in firsts.items():
                refusals[offset] = _Refusal(error, list(kept[offset]) if alone else None)
        return next(iter(firsts.values()))

    def _refused_error(
        self, claim: Claim, offset: int, topic: str, cause: BaseException
    ) -> OutputRefusedError:
        return OutputRefusedError(
            f"Kafka refused the output of {self._layout.label(claim.partition)} offset {offset} "
            f"to {topic}: {named(cause)}; its transaction is aborted, the input is not "
            "committed",
            self._keys.split(claim.partition).partition,
            offset,
            topic,
            cause,
        )

    def _give_up(self, claim: Claim, why: str) -> None:
        """The partition's transaction failed: its claim is given up (see the module)."""
        if claim.fenced:
            return
        log.warning(
            "member %s: %s: the transaction failed (%s); giving the partition up",
            self._id,
            self._layout.label(claim.partition),
            why,
        )
        self._on_fenced(self._states.commits.fenced_off([claim]))


def _check_send(
    topic: object, value: object, key: object, headers: object, partition: object
) -> None:
    """Refuse what `Output.send()` cannot write (checked before it is kept, so the error
    points at the send, not at a commit later).

    Raises:
        ConfigurationError: the argument named is not valid.
    """
    raw = (bytes, bytearray, memoryview)
    if not isinstance(topic, str) or not topic:
        raise ConfigurationError(f"topic must be a non-empty string, not {topic!r}")
    if value is not None and not isinstance(value, raw):
        raise ConfigurationError(f"value must be bytes or None, not {type(value).__name__}")
    if key is not None and not isinstance(key, raw):
        raise ConfigurationError(f"key must be bytes or None, not {type(key).__name__}")
    if key is None and value is None:
        raise ConfigurationError("a record needs a key or a value: both are None")
    if partition is not None and (
        not isinstance(partition, int) or isinstance(partition, bool) or partition < 0
    ):
        raise ConfigurationError(f"partition must be a non-negative integer, not {partition!r}")
    if headers is None:
        return
    if isinstance(headers, (str, bytes)) or not isinstance(headers, (list, tuple)):
        raise ConfigurationError(f"headers must be a list of (str, bytes) pairs, not {headers!r}")
    for header in headers:
        if (
            not isinstance(header, tuple)
            or len(header) != 2
            or not isinstance(header[0], str)
            or not isinstance(header[1], raw)
        ):
            raise ConfigurationError(f"headers must be (str, bytes) pairs, not {header!r}")


def _stretches(
    below: Sequence[int], suspects: Collection[int], offset: int
) -> list[tuple[list[int], int]]:
    """The transactions a commit up to ``offset`` makes of the finished inputs ``below`` it:
    ``(inputs, the offset committed)`` each, one for all when no input is a suspect; else each
    suspect alone, the stretches between them together."""
    stretches: list[list[int]] = []
    run: list[int] = []
    for o in below:
        if o in suspects:
            if run:
                stretches.append(run)
                run = []
            stretches.append([o])
        else:
            run.append(o)
    if run or not stretches:
        stretches.append(run)
    ends = [stretch[0] for stretch in stretches[1:]] + [offset]
    return list(zip(stretches, ends, strict=True))


def _gone(partition: int) -> Output:
    """An `Output` of a record whose claim ended: it refuses every send as fenced."""
    return Output(lambda: True, partition)
