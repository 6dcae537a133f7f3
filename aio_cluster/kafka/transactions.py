"""Transactional producers, one per claimed input partition, for the exactly-once mode.

A partition's producer has the ``transactional.id`` `transactional_id()` derives from the group,
the topic and the partition, so every member that ever claims the partition uses the same one.
Starting it sends ``InitProducerId``: Kafka bumps the id's epoch, which fences the producer of the
partition's previous owner (its next send or commit fails) and aborts the transaction it left
open (or waits until one it was committing is complete). So once `PartitionProducer.start()`
returned, the offset committed for the partition in Kafka is final: no older owner can commit
again.

One transaction carries the output of a stretch of input records and the offset after them
(`PartitionProducer.commit()`: begin, the sends in order, each send's outcome, ``TxnOffsetCommit``
for the group's name, end): a reader with ``isolation_level="read_committed"`` sees the output
exactly when the offset moved past its input.

Each send's outcome is known before the end: aiokafka 0.14 ends a transaction as committed even
when the broker refused one of its record batches (its commit waits for the batches without
looking at how they ended), which would commit the input's offset without its output. A refused
send aborts the transaction instead (`PartitionProducer.commit()` returns the `Refusals`). Such a
producer cannot write that output partition again (aiokafka counted the refused batch's sequence
numbers, the broker did not): only a new producer of the id, started with the next claim, can.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    InvalidProducerEpoch,
    KafkaError,
    ProducerFenced,
    TransactionalIdAuthorizationFailed,
)
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from ..errors import (
    BrokerError,
    ConfigurationError,
    ProducerFencedError,
    TransactionDeniedError,
)
from .diagnosis import named
from .options import KafkaOptions, parse_bootstrap
from .seams import Seams, finish_stop

__all__ = [
    "MAX_REQUEST_SIZE",
    "PartitionProducer",
    "Refusals",
    "Send",
    "denial",
    "denied_message",
    "transactional_id",
]

log = logging.getLogger(__name__)

MAX_REQUEST_SIZE = 1_048_576
"""The producers' bound on one request, in bytes (aiokafka's default, set explicitly): a record
larger than it cannot be sent."""

_SEAMS = Seams()
"""The producers' view of aiokafka's private names (`finish_stop()` is their one use)."""

_FENCING = (ProducerFenced, InvalidProducerEpoch)
"""The errors that mean another producer of the same ``transactional.id`` took over: nothing
this producer sends can commit any more."""


def transactional_id(group: str, topic: str, partition: int) -> str:
    """The ``transactional.id`` of the producer of one input partition of a group."""
    return f"aio-cluster.{group}.{topic}.{partition}"


@dataclass(frozen=True, slots=True)
class Send:
    """One record to write in a transaction, as `Output.send()` was given it."""

    topic: str
    value: bytes | None
    key: bytes | None = None
    headers: Sequence[tuple[str, bytes]] | None = None
    partition: int | None = None


Refusals = list[tuple[int, "Send", BaseException]]
"""The sends Kafka refused in a transaction: ``(input offset, send, the broker's error)`` each,
in the order they were sent (Kafka refuses a record batch whole: the innocent outputs that
shared a batch with a bad one are among them)."""


class PartitionProducer:
    """The transactional producer of one input partition (see the module)."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        group: str,
        source: tuple[str, int],
        *,
        client_id: str,
        timeout: float,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        """Configure the producer; nothing connects before `start()`.

        Args:
            bootstrap: Kafka's servers.
            group: the group's name: the offsets commit under it.
            source: the input partition whose output and offsets it commits.
            client_id: shown in the broker's logs.
            timeout: the bound, in seconds, on its start and on each commit.
            options: connection options (TLS, SASL).
        """
        self.group = group
        topic, partition = source
        self.source = TopicPartition(topic, partition)  # aiokafka's own type
        self.id = transactional_id(group, topic, partition)
        self._timeout = timeout
        self._producer = AIOKafkaProducer(
            bootstrap_servers=parse_bootstrap(bootstrap),
            client_id=f"{client_id}-txn",
            transactional_id=self.id,
            enable_idempotence=True,
            linger_ms=0,
            max_request_size=MAX_REQUEST_SIZE,
            **KafkaOptions(options or {}),
        )
        self.fenced = False
        """True once Kafka said a newer producer of the id took over."""
        self.stopped = False
        """True once the producer's stop completed: its sender routine and connections are
        gone."""
        self._stopping = False

    async def start(self) -> None:
        """Connect and initialise the id: this fences the previous owner's producer.

        Raises:
            ProducerFencedError: a newer producer of the id took over meanwhile.
            TransactionDeniedError: Kafka's ACLs refuse this principal the transactional id.
            BrokerError: Kafka did not answer within the timeout.
        """
        try:
            with anyio.fail_after(self._timeout):
                await self._producer.start()
        except BaseException as exc:
            await self.stop()
            translated = self._translated(exc, "start")
            if translated is exc:
                raise
            raise translated from exc

    async def check(self, send: Send) -> None:
        """Refuse a send that could never be written, before it is kept: a record larger than
        `MAX_REQUEST_SIZE`, or a partition the topic lacks (as far as the producer's metadata
        knows the topic).

        Raises:
            ConfigurationError: the send cannot be written.
            BrokerError: the topic's partitions could not be learned within the timeout.
        """
        headers = list(send.headers) if send.headers is not None else []
        size = DefaultRecordBatchBuilder.estimate_size_in_bytes(send.key, send.value, headers)
        if size > MAX_REQUEST_SIZE:
            raise ConfigurationError(
                f"a record of {size} bytes to {send.topic} is larger than the producer's "
                f"request bound ({MAX_REQUEST_SIZE} bytes)"
            )
        if send.partition is None:
            return
        try:
            with anyio.fail_after(self._timeout):
                partitions = await self._producer.partitions_for(send.topic)
        except Exception as exc:
            raise BrokerError(f"the partitions of {send.topic} are unknown: {named(exc)}") from exc
        if send.partition not in partitions:
            raise ConfigurationError(
                f"{send.topic} has no partition {send.partition} (it has {len(partitions)})"
            )

    async def commit(self, sends: Sequence[tuple[int, Send]], offset: int) -> Refusals:
        """One transaction: ``sends`` (each with the offset of the input it came from) in their
        order, and ``offset`` as the group's next offset of the input partition.

        Returns:
            The sends Kafka refused for good (a non-retriable error), when it did: the
            transaction is then aborted, and the producer cannot write to their partitions
            again (see the module): `stop()` it. Empty when the transaction committed.

        Raises:
            TransactionDeniedError: Kafka's ACLs refuse this principal the transactional id
                or the group: nothing was committed.
            ProducerFencedError: a newer owner fenced this producer: nothing was committed, and
                nothing this producer sends can be.
            BrokerError: the transaction failed otherwise (a send failed with a retriable
                error among them), or took longer than the timeout; its outcome is unknown
                until the producer is started again (`stop()` it: a new one's start aborts it,
                or waits for it).
        """
        producer = self._producer
        futures: list[asyncio.Future[Any]] = []
        failures: Refusals = []
        try:
            with anyio.fail_after(self._timeout):
                await producer.begin_transaction()
                for _offset, send in sends:
                    futures.append(
                        await producer.send(
                            send.topic,
                            send.value,
                            key=send.key,
                            partition=send.partition,
                            headers=list(send.headers) if send.headers is not None else None,
                        )
                    )
                for (source, send), future in zip(sends, futures, strict=True):
                    error = await _outcome(future)
                    if error is None:
                        continue
                    if isinstance(error, _FENCING) or _retriable(error):
                        # A transient failure (a partition leaderless past the request's
                        # timeout, say) is no refusal: the transaction fails as a whole.
                        raise error
                    failures.append((source, send, error))
                if not failures:
                    await producer.send_offsets_to_transaction({self.source: offset}, self.group)
                    await producer.commit_transaction()
        except BaseException as exc:
            for future in futures:
                # Their errors are the commit's: retrieved, so none is reported as lost.
                future.add_done_callback(_retrieved)
            # Aborted whatever ended it, a cancellation too: a transaction left open holds
            # read_committed readers of its outputs back until the broker times it out.
            await self._abort()
            translated = self._translated(exc, "commit")
            if translated is exc:
                raise
            raise translated from exc
        if failures:
            await self._abort()
        return failures

    async def _abort(self) -> None:
        """Abort the failed transaction, as far as the producer still can (a fenced one
        cannot: the next owner's start aborted it); this also takes its error in, so that
        aiokafka does not report it as never retrieved."""
        try:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self._timeout):
                await self._producer.abort_transaction()
        except Exception as exc:
            log.debug("transactional producer %r: aborting failed: %r", self.id, exc)

    async def stop(self) -> None:
        """Close the producer (a transaction left open is aborted by the next owner's start),
        shielded from anyio's cancellations. A graceful stop that runs out of the timeout (an
        idempotent producer retries its pending batches for ever while no broker answers) is
        finished at once: its sender routine ended, its pending batches failed, its connections
        closed. A stop cut short all the same (a cancellation from outside anyio) leaves
        `stopped` False: call it again to finish it. Never raises but a cancellation."""
        if self.stopped:
            return
        try:
            with anyio.CancelScope(shield=True):
                with anyio.move_on_after(self._timeout):
                    if self._stopping:
                        # aiokafka's stop() marked the producer closed before it was cut
                        # short: calling it again would do nothing.
                        await finish_stop(_SEAMS, self._producer)
                    else:
                        self._stopping = True
                        await self._producer.stop()
                    self.stopped = True
                if not self.stopped:
                    log.debug(
                        "transactional producer %r: its stop took over %g s: finishing it",
                        self.id,
                        self._timeout,
                    )
                    with anyio.move_on_after(self._timeout):
                        await finish_stop(_SEAMS, self._producer)
                        self.stopped = True
        except Exception as exc:
            # A fenced or broken producer may fail to stop: it is gone all the same.
            log.debug("transactional producer %r: stopping failed: %r", self.id, exc)
            self.stopped = True

    def _translated(self, exc: BaseException, what: str) -> BaseException:
        """Kafka's error as the package's (a cancellation stays what it is)."""
        denied = denial(exc)
        if denied is not None:
            return TransactionDeniedError(
                denied_message(denied, self.id, self.group)
                + f" ({what} of the producer of {self.source.topic} "
                f"partition {self.source.partition})"
            )
        if isinstance(exc, _FENCING) or _fenced_inside(exc):
            self.fenced = True
            return ProducerFencedError(
                f"the producer {self.id!r} was fenced: a newer owner of {self.source.topic} "
                f"partition {self.source.partition} took over; this transaction is aborted",
                self.source.partition,
            )
        if isinstance(exc, TimeoutError):
            return BrokerError(
                f"transactional producer {self.id!r}: {what} took over {self._timeout:g} s"
            )
        if isinstance(exc, KafkaError) or type(exc).__module__.startswith("aiokafka"):
            return BrokerError(f"transactional producer {self.id!r}: {what} failed: {named(exc)}")
        return exc


async def _outcome(future: asyncio.Future[Any]) -> BaseException | None:
    """How a send ended, once it did: None when Kafka wrote it, else the broker's error. Waits
    without cancelling aiokafka's future when the wait is cancelled (aiokafka settles it itself).

    Raises:
        KafkaError: the send was cancelled (its producer is closing): its outcome is unknown.
    """
    if not future.done():
        ended = anyio.Event()
        future.add_done_callback(lambda _: ended.set())
        await ended.wait()
    if future.cancelled():
        raise KafkaError("the send was cancelled: the producer is closing")
    return future.exception()


def _retriable(error: BaseException) -> bool:
    """Whether Kafka's error is a transient one (aiokafka's ``retriable``), which another try
    may get past: never a refusal for good."""
    return isinstance(error, KafkaError) and bool(error.retriable)


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _fenced_inside(exc: BaseException) -> bool:
    """Whether a fencing error is the cause of ``exc`` (aiokafka wraps some)."""
    return _inside(exc.__cause__ or exc.__context__, _FENCING) is not None


def denial(exc: BaseException) -> BaseException | None:
    """Kafka's refusal by its ACLs of the transactional id or of the group, when that is
    ``exc`` or its cause (aiokafka wraps some); None otherwise."""
    return _inside(exc, (TransactionalIdAuthorizationFailed, GroupAuthorizationFailedError))


def denied_message(denied: BaseException, transactional_id: str, group: str) -> str:
    """What Kafka's ACLs refused (`denial()`), and what to grant."""
    if isinstance(denied, TransactionalIdAuthorizationFailed):
        return (
            f"Kafka's ACLs refuse this principal the transactional id {transactional_id!r}: "
            f"grant Write and Describe on the transactional ids prefixed "
            f"'aio-cluster.{group}.'"
        )
    return (
        f"Kafka's ACLs refuse this principal the group {group!r}, whose offsets commit in the "
        "transactions: grant Read and Describe on the group"
    )


def _inside(
    seen: BaseException | None, kinds: tuple[type[BaseException], ...]
) -> BaseException | None:
    """The first of ``seen`` and its causes (5 deep) that is one of ``kinds``."""
    depth = 0
    while seen is not None and depth < 6:
        if isinstance(seen, kinds):
            return seen
        seen = seen.__cause__ or seen.__context__
        depth += 1
    return None
