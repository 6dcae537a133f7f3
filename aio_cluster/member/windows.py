"""Windows: the bookkeeping of `process()`'s running batches, one per partition: which records
may start, in which order, and how far the completed prefix got. Pure: no I/O, no waiting; the
processor (`aio_cluster.member.processing`) runs the handlers and asks here what follows.

The ordering decides which records of a batch may run side by side: ``"key"``, those with
different keys (a key's records run in offset order, one after another; the key's bytes are
compared, so a deserialized key need not be hashable); ``"partition"``, none; ``"none"``, any.

A window that stops taking records (a handover, a shutdown) still starts the records before the
last one finished or running (its *horizon*): once they finished, the prefix passes every
finished record, so the next owner repeats none. One whose record failed for good starts
nothing more.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from ..config import Ordering
from ..kafka.records import Record, raw_key
from ..kafka.topics import PartitionKey
from .claims import Batch, Claim

__all__ = ["Entry", "Window"]


@dataclass(eq=False, slots=True)
class Entry:
    """One record of a running batch that may start (or has started)."""

    window: Window
    index: int
    started: float = 0.0
    """When its first attempt started (``time.monotonic()``)."""
    cancel: Callable[[], object] | None = None
    """Cancels its retries and dead-lettering, once it failed."""

    @property
    def record(self) -> Record:
        return self.window.batch[self.index]


@dataclass(eq=False)
class Window:
    """The running batch of one partition and how far its records got."""

    claim: Claim
    batch: Batch
    ordering: Ordering
    done: bytearray = field(init=False)
    next_of: list[int] = field(default_factory=list)
    """Index -> the index of the next record of the same key (-1: none), set by `first()`: a
    key's records run one after another, so a record that finished hands on to this one."""
    prefix: int = 0
    """The index of the first unfinished record."""
    furthest: int = -1
    """The index of the last record finished."""
    horizon: int = -1
    """Once it stopped taking: the last index that may still start (-1: none)."""
    running: set[Entry] = field(default_factory=set)
    """Records started and not finished: in a handler, waiting for a retry, or being sent to the
    dead-letter topic."""
    taking: bool = True
    """False once only the records up to `horizon` may start (handover, stop, shutdown)."""
    gone: bool = False
    """True once it ended (settled or given up)."""

    def __post_init__(self) -> None:
        self.done = bytearray(len(self.batch))

    @property
    def partition(self) -> PartitionKey:
        return self.claim.partition

    @property
    def unfinished(self) -> int:
        """Records from the prefix on: not known to be finished."""
        return len(self.batch) - self.prefix

    def first(self) -> list[Entry]:
        """The records that may start at once: every record with ``"none"``, else the first of
        each key."""
        if self.ordering == "none":
            return [Entry(self, index) for index in range(len(self.batch))]
        size = len(self.batch)
        if self.ordering == "partition":
            self.next_of = [*range(1, size), -1]
            return [Entry(self, 0)] if size else []
        first = []
        self.next_of = next_of = [-1] * size
        last: dict[Hashable, int] = {}
        for index, record in enumerate(self.batch):
            key = raw_key(record)
            before = last.get(key)
            if before is None:
                first.append(Entry(self, index))
            else:
                next_of[before] = index
            last[key] = index
        return first

    def may_start(self, index: int) -> bool:
        """Whether the record at ``index`` may (still) start."""
        return not self.gone and (self.taking or index <= self.horizon)

    def drained(self) -> bool:
        """True once it stopped taking and every record that may start has finished."""
        return not self.taking and self.prefix > self.horizon and not self.running

    def finished(self, index: int) -> tuple[Entry | None, int]:
        """The record at ``index`` finished.

        Returns:
            The next record of its key, when that may start now; and how many records the
            completed prefix grew by.
        """
        self.done[index] = 1
        self.furthest = max(self.furthest, index)
        following = None
        if self.ordering != "none":
            after = self.next_of[index]
            if after >= 0 and self.may_start(after):
                following = Entry(self, after)
        if index != self.prefix:
            return following, 0
        done, prefix, size = self.done, self.prefix + 1, len(self.batch)
        while prefix < size and done[prefix]:
            prefix += 1
        grown, self.prefix = prefix - self.prefix, prefix
        return following, grown

    def stop_taking(self, *, fill_gaps: bool) -> None:
        """Start no record beyond the horizon: with ``fill_gaps`` (a handover or a shutdown) the
        records before the last one finished or running still run; without (a record failed
        for good), nothing more starts."""
        if self.taking:
            self.taking = False
            if fill_gaps:
                self.horizon = max(
                    self.furthest, max((entry.index for entry in self.running), default=-1)
                )
        elif not fill_gaps:
            self.horizon = -1

    def give_up(self) -> None:
        """Nothing of it starts any more, and it never commits: given up (or settled)."""
        self.taking = False
        self.gone = True
