"""The look-ups running on each of a fetcher's offset readers, so that a reader is closed only once
its look-ups ended: a fetcher renewed after aiokafka's background fetch died replaces its reader
(see `aio_cluster.kafka.fetcher`), and a look-up still running on the old one would open a
connection on its closed client that nobody closes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from .offset_reader import OffsetReader

__all__ = ["LookUps"]

T = TypeVar("T")


class LookUps:
    """Counts the look-ups running, by the reader they run on."""

    def __init__(self) -> None:
        self._running: dict[OffsetReader, int] = {}
        self._ended = asyncio.Event()
        """Set as a reader's last look-up ends."""

    async def run(self, reader: OffsetReader, call: Callable[[OffsetReader], Awaitable[T]]) -> T:
        """``call(reader)``, counted while it runs."""
        self._running[reader] = self._running.get(reader, 0) + 1
        try:
            return await call(reader)
        finally:
            left = self._running.pop(reader) - 1
            if left:
                self._running[reader] = left
            else:
                self._ended.set()

    async def ended(self, reader: OffsetReader) -> None:
        """Until no look-up runs on ``reader``."""
        while reader in self._running:
            self._ended.clear()
            await self._ended.wait()
