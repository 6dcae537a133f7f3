"""Record: the shape of one Kafka record as the library hands it out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = ["Record"]


class Record(Protocol):
    """One Kafka record as the library hands it out (aiokafka's ``ConsumerRecord``).

    ``key`` and ``value`` are the raw bytes; with a ``key_deserializer`` or ``value_deserializer``
    given to the group they hold what it returned (typed as bytes here all the same).
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
