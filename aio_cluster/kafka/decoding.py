"""Keys and values through the deserializers the member was given, record by record, so that one
that fails names its record exactly ([DeserializationError][aio_cluster.DeserializationError]),
and the records before it are still handed out."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import DeserializationError
from .records import DecodedRecord
from .topics import PartitionKey

__all__ = ["Decoder", "Deserializer"]

Deserializer = Callable[[bytes], Any]
"""Turns a record's raw key or value into what the batches hand out."""


class Decoder:
    """The key and value deserializers of one fetcher, applied to what it fetched."""

    def __init__(self, key: Deserializer | None, value: Deserializer | None) -> None:
        self._fields = tuple(
            (field, deserializer)
            for field, deserializer in (("key", key), ("value", value))
            if deserializer is not None
        )

    @property
    def changes_nothing(self) -> bool:
        """Whether no deserializer was given: the records are handed out as fetched."""
        return not self._fields

    def decode(
        self,
        fetched: Mapping[PartitionKey, list[Any]],
        before: Mapping[PartitionKey, int],
        seek: Callable[[PartitionKey, int], None],
    ) -> dict[PartitionKey, list[Any]]:
        """The records with their keys and values deserialized; a partition's records stop in
        front of the first that fails, and ``seek`` makes the fetcher read that one again next
        time (``before``: where each partition's fetch began).

        Raises:
            DeserializationError: the first record of a partition failed (then nothing of this
                fetch is returned: every partition is read again from where it was).
        """
        decoded: dict[PartitionKey, list[Any]] = {}
        for partition, records in fetched.items():
            good: list[Any] = []
            for record in records:
                try:
                    good.append(self._record(record))
                except DeserializationError:
                    seek(partition, record.offset)
                    if good:
                        break
                    for other in fetched:
                        if other != partition:
                            seek(other, before[other])
                    raise
            if good:
                decoded[partition] = good
        return decoded

    def _record(self, record: Any) -> Any:
        changes: dict[str, Any] = {}
        for field, deserializer in self._fields:
            raw = getattr(record, field)
            if raw is None:
                continue
            try:
                changes[field] = deserializer(raw)
            except Exception as exc:
                raise DeserializationError(
                    record.topic,
                    record.partition,
                    record.offset,
                    key=record.key,
                    value=record.value,
                    field=field,
                    reason=f"{type(exc).__name__}: {exc}",
                ) from exc
        fields = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
        fields.update(changes)
        return DecodedRecord(**fields, raw_key=record.key, raw_value=record.value)
