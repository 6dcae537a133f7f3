"""A fetch error that fetching again does not mend: which partition it came from, and what can be
read before it.

aiokafka raises such an error (a codec this machine lacks, a corrupt batch, a record too large, a
topic not authorized) without naming the partition, and may have dropped records of other
partitions it had drained in the same call. So every partition is read again from where it was,
each on its own; the first one that fails is read again record by record up to the unreadable
one. What cannot be read becomes a [FetchError][aio_cluster.FetchError] (or a
[ReadRefusedError][aio_cluster.ReadRefusedError]) naming the partition and the offset.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import anyio
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import (
    CorruptRecordException,
    KafkaError,
    RecordTooLargeError,
    TopicAuthorizationFailedError,
    UnsupportedCodecError,
)

from ..errors import FetchError, ReadRefusedError
from .topics import PartitionKey

__all__ = ["UNREADABLE", "isolate", "reason"]

UNREADABLE = (
    UnsupportedCodecError,
    CorruptRecordException,
    RecordTooLargeError,
    TopicAuthorizationFailedError,
)
"""aiokafka's fetch errors that fetching again does not mend."""

_PROBE_MS = 5_000
"""How long the search for the partition behind an unreadable fetch waits for its answers."""


def reason(exc: KafkaError) -> str:
    """What a fetch error means to the reader of a `FetchError`, with the remedy where one is
    known."""
    if isinstance(exc, UnsupportedCodecError):
        return (
            f"{exc}; aiokafka decodes snappy, lz4 and zstd with cramjam, a dependency of "
            "aio-cluster: install it (pip install cramjam) where it is missing"
        )
    if isinstance(exc, TopicAuthorizationFailedError):
        return f"Kafka refused to let this client read the topic ({type(exc).__name__})"
    return f"{type(exc).__name__}: {exc}"


async def isolate(
    consumer: AIOKafkaConsumer,
    tps: list[Any],
    before: Mapping[PartitionKey, int],
    key: Callable[[Any], PartitionKey],
    leader: Callable[[PartitionKey], int | None],
) -> dict[Any, list[Any]]:
    """Find the partition behind an unreadable fetch of ``tps`` from the positions ``before``,
    and return what can be read before it (see the module); ``key`` names a
    partition of aiokafka's by its key, ``leader`` gives a partition's leader.

    Raises:
        FetchError: no record of the failing partition can be read before the failure.
        ReadRefusedError: the same, because Kafka refused to let this client read the topic.
    """
    for tp in tps:
        consumer.seek(tp, before[key(tp)])
    fetched: dict[Any, list[Any]] = {}
    failed: list[tuple[Any, KafkaError]] = []
    async with anyio.create_task_group() as probing:

        async def probe(tp: Any) -> None:
            try:
                fetched.update(await consumer.getmany(tp, timeout_ms=_PROBE_MS))
                return
            except UNREADABLE as unreadable:
                failed.append((tp, unreadable))
            except Exception:
                consumer.seek(tp, before[key(tp)])  # a passing error: again
            # The first failure ends the probes: one still waiting for the broker has taken
            # no record yet, safe to cancel.
            probing.cancel_scope.cancel()

        for tp in tps:
            probing.start_soon(probe, tp)
    if not failed:
        return fetched
    failed.sort(key=lambda item: key(item[0]))
    for tp, _error in failed[1:]:
        consumer.seek(tp, before[key(tp)])
    culprit, cause = failed[0]
    readable, failing = await _read_up_to_failure(consumer, culprit, before[key(culprit)])
    if readable or not failing:
        if readable:
            fetched[culprit] = readable
        return fetched
    for tp in fetched:
        consumer.seek(tp, before[key(tp)])
    offset = before[key(culprit)]
    if isinstance(cause, TopicAuthorizationFailedError):
        raise ReadRefusedError(
            culprit.topic,
            culprit.partition,
            offset,
            reason(cause),
            broker=leader(key(culprit)),
            error=type(cause).__name__,
        ) from cause
    raise FetchError(culprit.topic, culprit.partition, offset, reason(cause)) from cause


async def _read_up_to_failure(
    consumer: AIOKafkaConsumer, tp: Any, offset: int
) -> tuple[list[Any], bool]:
    """The records of ``tp`` from ``offset`` that can be read before the unreadable one,
    taken one at a time so that aiokafka's position stops exactly in front of it, and
    whether the failure came again (False: nothing more arrived in time, or another error)."""
    consumer.seek(tp, offset)
    readable: list[Any] = []
    while True:
        try:
            more = await consumer.getmany(tp, timeout_ms=_PROBE_MS, max_records=1)
        except KafkaError as exc:
            # Read on from here next time (this also drops what aiokafka holds of the batch).
            consumer.seek(tp, readable[-1].offset + 1 if readable else offset)
            return readable, isinstance(exc, UNREADABLE)
        if not more:
            return readable, False
        readable += more[tp]
