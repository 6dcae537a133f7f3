"""Record: the shape of one Kafka record as the library hands it out, and the raw bytes of one
whose key or value a deserializer changed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka.structs import ConsumerRecord

__all__ = ["DecodedRecord", "Record", "raw_key", "raw_value"]


class Record(Protocol):
    """One Kafka record as the library hands it out (aiokafka's ``ConsumerRecord``).

    ``key`` and ``value`` are the raw bytes; with a ``key_deserializer`` or ``value_deserializer``
    given to the group they hold what it returned (typed as bytes here all the same), and
    `raw_key()` / `raw_value()` give the bytes as the broker holds them.
    """

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...


@dataclass
class DecodedRecord(ConsumerRecord[Any, Any]):  # type: ignore[misc]  # aiokafka is untyped
    """A record whose key or value a deserializer changed: it keeps the bytes it came with, so
    that a dead letter carries the record as it was written and ``ordering="key"`` orders by
    the key's bytes (a deserialized key need not be hashable)."""

    raw_key: bytes | None = None
    raw_value: bytes | None = None


def raw_key(record: Record) -> bytes | None:
    """The key's bytes as the broker holds them."""
    return record.raw_key if isinstance(record, DecodedRecord) else record.key


def raw_value(record: Record) -> bytes | None:
    """The value's bytes as the broker holds them."""
    return record.raw_value if isinstance(record, DecodedRecord) else record.value
