"""ReadProgress: whether a member makes progress reading each partition it fetches. Pure.

A member's claims live as long as its ZooKeeper session, which says nothing of Kafka: a member
cut off from the brokers (or refused by them) and not from ZooKeeper would keep its partitions
for ever. So the fetcher keeps, for each partition it fetches, when it last made progress: the
last answer of the partition's leader that named it without an error (aiokafka's
``last_poll_timestamp``, which an empty answer to a long poll moves too), or records handed
out. A partition without progress for longer than ``timeout`` while the member asked for it
is *unreadable* by this member.

What is measured is the failure to fetch, never the absence of records: a partition counts only
while the member asks for it (its delivery passes it to each fetch). One it stops asking for (an
operator's pause, a budget's hold, batches still busy in the handlers) is not measured, and its
clock starts again when it is asked for after a gap longer than ``gap``: aiokafka sends no
request for a partition whose records the member has not taken yet, and such a partition is
slow, not unreadable.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["NoProgress", "ReadProgress"]

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class NoProgress:
    """Why a partition counts as unreadable by this member.

    Attributes:
        since: the last progress (Unix seconds): no answer of the leader named the partition
            without an error since then.
        broker: the node id of the partition's leader as the member knows it (None: none
            known, the metadata has no leader for it).
        error: the last fetch error seen, or a timeout's description when none was seen.
    """

    since: float
    broker: int | None
    error: str


class ReadProgress(Generic[K]):
    """The progress of each partition a member fetches (see the module); times in Unix
    seconds, given by the caller."""

    def __init__(self, timeout: float, gap: float) -> None:
        """Args:
        timeout: ``fetch_timeout``: how long a partition may go without progress.
        gap: the longest pause between two fetches of a partition the member keeps asking for;
            a longer one (the member did not want records of it) starts its clock again.
        """
        self.timeout = timeout
        self._gap = gap
        self._since: dict[K, float] = {}
        """Partition -> its last progress, or when the member began asking for it."""
        self._asked: dict[K, float] = {}
        """Partition -> when the member last asked for it."""
        self._error: str | None = None
        self._error_at = 0.0

    def asked(self, partitions: Collection[K], now: float) -> None:
        """The member asks for records of ``partitions`` now."""
        for partition in partitions:
            last = self._asked.get(partition)
            if last is None or now - last > self._gap:
                self._since[partition] = max(self._since.get(partition, now), now)
            self._asked[partition] = now

    def progressed(self, partition: K, at: float) -> None:
        """The partition's leader answered a fetch of it without an error at ``at``, or its
        records were handed out then."""
        if partition in self._asked:
            self._since[partition] = max(self._since.get(partition, at), at)

    def failed(self, error: str, now: float) -> None:
        """A fetch failed with ``error`` (told with the partitions that go without progress)."""
        self._error = error
        self._error_at = now

    def forget(self, partitions: Collection[K]) -> None:
        """The member no longer fetches ``partitions`` (given up, or held)."""
        for partition in partitions:
            self._since.pop(partition, None)
            self._asked.pop(partition, None)

    def unreadable(self, now: float, leader: Callable[[K], int | None]) -> dict[K, NoProgress]:
        """The partitions without progress for longer than ``timeout`` that the member still
        asks for, each with its leader (``leader``) and the last error."""
        found = {}
        for partition, since in self._since.items():
            if now - since <= self.timeout or now - self._asked[partition] > self._gap:
                continue
            error = self._error if self._error is not None and self._error_at >= since else None
            found[partition] = NoProgress(
                since=since,
                broker=leader(partition),
                error=error or f"no answer from the leader for {now - since:.0f} s",
            )
        return found
