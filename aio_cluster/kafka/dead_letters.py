"""DeadLetters: records whose handler failed for good, written to a dead-letter topic.

Each record goes out with its own key, value and headers, plus headers naming where it came from
and why it failed (`HEADERS`), through an idempotent producer waiting for every in-sync replica
(``acks="all"``): the consumer stores its offset past the record only once the broker has it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from ..errors import BrokerError
from .diagnosis import connect_failure
from .offset_reader import OffsetReader
from .options import KafkaOptions, parse_bootstrap
from .records import Record, raw_key, raw_value

__all__ = ["HEADERS", "DeadLetters"]

HEADERS = {
    "topic": "aio-cluster.dlt.topic",
    "partition": "aio-cluster.dlt.partition",
    "offset": "aio-cluster.dlt.offset",
    "error_type": "aio-cluster.dlt.error.type",
    "error_message": "aio-cluster.dlt.error.message",
    "attempts": "aio-cluster.dlt.attempts",
}
"""The names of the headers added to a dead letter; values are UTF-8 text."""

_MESSAGE_LIMIT = 4096
"""The most characters of an error's message carried in a header."""


def error_type(error: BaseException) -> str:
    """An error's class as ``module.QualifiedName`` (builtins without the module)."""
    cls = type(error)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def dead_letter_headers(
    record: Record, error: BaseException, attempts: int
) -> list[tuple[str, bytes]]:
    """The record's own headers followed by the ones naming its origin and its failure."""
    added = {
        "topic": record.topic,
        "partition": str(record.partition),
        "offset": str(record.offset),
        "error_type": error_type(error),
        "error_message": str(error)[:_MESSAGE_LIMIT],
        "attempts": str(attempts),
    }
    return [*record.headers, *((HEADERS[name], value.encode()) for name, value in added.items())]


class DeadLetters:
    """An idempotent producer of one dead-letter topic."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        topic: str,
        *,
        client_id: str,
        request_timeout_ms: int = 30_000,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        """Configure the producer; nothing connects before `start()`.

        Args:
            bootstrap: Kafka servers as ``"host:port"``.
            topic: the dead-letter topic; it must exist.
            client_id: shown in the broker's logs.
            request_timeout_ms: the bound on each request.
            options: connection options (TLS, SASL), see [KafkaOptions][aio_cluster.KafkaOptions].

        Raises:
            ConfigurationError: malformed servers or options.
        """
        self.topic = topic
        self._servers = parse_bootstrap(bootstrap)
        self._client_id = f"{client_id}-dead-letters"
        self._options = KafkaOptions({"request_timeout_ms": request_timeout_ms, **(options or {})})
        self._producer: AIOKafkaProducer | None = None

    async def start(self) -> None:
        """Connect, after checking that the topic exists.

        Raises:
            ConfigurationError: the dead-letter topic does not exist.
            AuthenticationError: a broker refused the TLS handshake or the credentials.
            BrokerError: no broker answered.
        """
        reader = OffsetReader(self._servers, client_id=self._client_id, options=self._options)
        await reader.start()
        try:
            await reader.partitions(self.topic)
        finally:
            await reader.stop()
        # Made only now: an aiokafka producer that is never started warns when collected.
        self._producer = producer = AIOKafkaProducer(
            bootstrap_servers=self._servers,
            client_id=self._client_id,
            acks="all",
            enable_idempotence=True,
            **self._options,
        )
        try:
            await producer.start()
        except KafkaError as exc:
            self._producer = None
            await producer.stop()
            raise await connect_failure(self._servers, self._options, self._client_id, exc) from exc

    async def stop(self) -> None:
        """Close the producer; a send under way fails."""
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    async def send(
        self,
        record: Record,
        error: BaseException,
        attempts: int,
        *,
        extra: Sequence[tuple[str, bytes]] = (),
    ) -> None:
        """Write ``record`` to the dead-letter topic; returns once every in-sync replica has it.

        Args:
            record: the record whose handler failed.
            error: the last failure.
            attempts: how often the handler ran.
            extra: headers added after the others (an operator's skip names who and when).

        Raises:
            BrokerError: the broker did not take it (the caller may try again).
        """
        if self._producer is None:
            raise BrokerError(f"the producer of dead-letter topic {self.topic!r} is not running")
        try:
            await self._producer.send_and_wait(
                self.topic,
                value=raw_value(record),
                key=raw_key(record),
                headers=[*dead_letter_headers(record, error, attempts), *extra],
            )
        except KafkaError as exc:
            raise BrokerError(f"dead letter to {self.topic!r} failed: {exc}") from exc
