"""Windows: the bookkeeping of `process()`'s running batches, one per partition: which records
may start, in which order, and how far the completed prefix got. Pure: no I/O, no waiting; the
processor (`aio_cluster.member.processing.processor`) runs the handlers and asks here what follows.

Records are taken in offset order (`Window.take()`). The ordering decides which records may run
side by side: ``"key"``, those with different keys (a key's records run in offset order, one
after another; the key's bytes are compared, so a deserialized key need not be hashable);
``"partition"``, none; ``"none"``, any.

A key is *busy* while one of its records is *out*: taken and not finished, and seen (or about to
be seen) by other tasks: waiting in its handler, waiting for a retry, or queued for a worker
(`Window.put_out()`). A record whose key is busy is not started when taken but queued behind its
key, and handed on when the key's record out finishes. A record that a worker takes and whose
handler finishes without waiting is never out: no other task ran meanwhile, so none could take
a record of its key. So a batch of handlers that never wait costs no key bookkeeping at all,
and one whose handlers wait pays for the records out only. A record whose key no other record
of its batch has never makes its key busy either: nothing of its partition could wait behind it
(a partition's batches never run side by side); a batch of distinct keys runs under ``"none"``
once a key is first needed.

A worker whose handlers finish without waiting runs the batch's records *in place*, one after
another (`Window.begin_run()`): it only says which record it runs (`Window.in_place`); the
records of the run before it are known to have finished, and are booked when someone looks
(the window's own methods catch up first), or when the run ends (`Window.end_run()`).

A window that stops taking records (a handover, a shutdown) still starts the records before the
last one finished or running (its *horizon*): once they finished, the prefix passes every
finished record, so the next owner repeats none. One whose record failed for good starts
nothing more.

Records that finished before the batch came (noted by a ``process()`` that stopped without a
graceful handover: `aio_cluster.member.delivery.finished`) are passed over (`Window.pass_over()`):
never taken, and passed by the prefix like any finished record.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from ...config import Ordering
from ...kafka.records import Record, raw_key
from ...kafka.topics import PartitionKey
from ..delivery.claims import Batch, Claim

__all__ = ["Entry", "Window"]

_ONE_KEY = 0
"""The key of every record under ``ordering="partition"``."""

_UNKNOWN: Hashable = object()
"""`Window.finished()` was not given the key: it finds it again."""

_ALONE: Hashable = object()
"""The key of a record whose key no other record of its batch has: it is never busy."""


@dataclass(eq=False, slots=True)
class Entry:
    """One record of a running batch that may start (or has started)."""

    window: Window
    index: int
    out: bool = False
    """Whether it is out (see the module): its key stays busy until it finished."""
    key: Hashable = None
    """Once out, the key `Window.put_out()` made busy for it."""
    started: float = 0.0
    """When its current attempt started, or the wait after its last failure (a back-off, the
    dead letter's sending) (``time.monotonic()``): what ``stuck_after`` is counted from."""
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
    cursor: int = 0
    """The index of the first record not taken yet."""
    busy: dict[Hashable, deque[int] | None] = field(default_factory=dict)
    """Busy key -> the indices of its records taken since, queued in offset order (None until
    one is)."""
    in_place: int = -1
    """The record a worker runs in place now (-1: none); its run's records before it, from
    `run_start` on, finished (booked when someone looks)."""
    run_start: int = 0
    """The first record of the run in place not booked yet."""
    _keys: list[Hashable] | None = None
    """Index -> the record's key, once a key was first needed (never, while nothing is out)."""
    _prefix: int = 0
    _furthest: int = -1
    _grown: int = 0
    """Records the prefix passed since `take_grown()` was last asked."""
    horizon: int = -1
    """Once it stopped taking: the last index that may still start (-1: none)."""
    _last_passed: int = -1
    """The last record finished before the batch came (`pass_over()`; -1: none): up to it,
    taking passes over finished records."""
    asked: Ordering = field(init=False)
    """The ordering the processor asked for (`ordering` may turn ``"none"`` for a batch of
    distinct keys, until it grows)."""
    held_run: bool = False
    """True while a run in place holds the rest of the batch (`begin_run()` to `end_run()`)."""
    _rekeyed: bool = False
    """True once it grew with keys known: a record put out before may have been told its key
    had no other record (`finished()` finds it again)."""
    _counts: Counter[bytes | None] | None = None
    """Once it grew with keys known: key -> its records."""
    _alone_at: dict[bytes | None, int] | None = None
    """Once it grew with keys known: key of a single record -> that record's index."""
    running: set[Entry] = field(default_factory=set)
    """Records started and not finished that other tasks may see: in a handler that waits,
    waiting for a retry, or being sent to the dead-letter topic."""
    taking: bool = True
    """False once only the records up to `horizon` may start (handover, stop, shutdown)."""
    gone: bool = False
    """True once it ended (settled or given up)."""

    def __post_init__(self) -> None:
        self.done = bytearray(len(self.batch))
        self.asked = self.ordering

    @property
    def partition(self) -> PartitionKey:
        return self.claim.partition

    @property
    def prefix(self) -> int:
        """The index of the first unfinished record."""
        if self.in_place > self.run_start:
            self._catch_up()
        return self._prefix

    @property
    def unfinished(self) -> int:
        """Records from the prefix on: not known to be finished."""
        return len(self.batch) - self.prefix

    def take_grown(self) -> int:
        """How many records the prefix passed since the last call: the processor's count of
        the records it holds follows the windows' prefixes with this."""
        if self.in_place > self.run_start:
            self._catch_up()
        grown, self._grown = self._grown, 0
        return grown

    def _catch_up(self) -> None:
        """Book the records of the run in place before the one it runs now (asked by what a
        handler run in place may call: the processor's watcher methods, its statistics)."""
        if self.in_place > self.run_start:
            self._book(self.run_start, self.in_place)
            self.run_start = self.in_place

    def _key(self, index: int) -> Hashable:
        """The key that orders the record at ``index`` (one for all under ``"partition"``)."""
        if self.ordering == "partition":
            return _ONE_KEY
        keys = self._keys if self._keys is not None else self._find_keys()
        return keys[index]

    def _find_keys(self) -> list[Hashable]:
        """Every record's key, found at once the first time one is needed: records are out,
        so many keys will be. A key that no other record of the batch has is `_ALONE`."""
        keys = [raw_key(record) for record in self.batch]
        counts = Counter(keys)
        if len(counts) == len(keys):
            # No two records share a key: the order by key asks nothing of this batch.
            self.ordering = "none"
            self._keys = [_ALONE] * len(keys)
        else:
            self._keys = [key if counts[key] > 1 else _ALONE for key in keys]
        return self._keys

    def pass_over(self, indices: list[int]) -> None:
        """The records at ``indices`` (ascending) finished before the batch came (see
        `aio_cluster.member.delivery.finished`): none of them is taken, and the prefix passes them.
        They do not move the horizon: a stop runs no gap before them (they stay noted)."""
        if not indices:
            return
        for index in indices:
            self.done[index] = 1
        self._last_passed = indices[-1]
        self._advance(self._prefix)

    def finished_beyond(self) -> list[int]:
        """The indices of the records past the prefix that finished."""
        done, prefix = self.done, self.prefix
        return [index for index in range(prefix + 1, len(self.batch)) if done[index]]

    def _pass_finished(self) -> None:
        """Move the cursor past the records that finished before the batch came."""
        done, size = self.done, len(self.batch)
        while self.cursor < size and done[self.cursor]:
            self.cursor += 1

    def take(self) -> int:
        """The index of the next record that may start now, taken (-1: none now).

        Under ``"key"``, records whose key is busy are passed over and queued behind it; under
        ``"partition"``, none is taken while one is out.
        """
        size = len(self.batch)
        if not self.taking:
            return -1
        if self.cursor <= self._last_passed:
            self._pass_finished()
        busy = self.busy
        if not busy or self.ordering == "none":
            if self.cursor < size:
                self.cursor += 1
                return self.cursor - 1
            return -1
        if self.ordering == "partition":
            return -1
        keys = self._keys if self._keys is not None else self._find_keys()
        while self.cursor < size:
            index = self.cursor
            self.cursor += 1
            if index <= self._last_passed and self.done[index]:
                continue
            key = keys[index]
            if key not in busy:
                return index
            waiting = busy[key]
            if waiting is None:
                busy[key] = waiting = deque()
            waiting.append(index)
        return -1

    def begin_run(self) -> range:
        """Records one worker may run in place, one after another, taken: the rest of the batch
        while no key of it is busy (under ``"none"``, always; up to the next record passed
        over, the rest staying taken until `end_run()`), else the one record `take()` finds.
        The worker sets `in_place` to each record as it starts it, and ends a run that is not
        empty with `end_run()`. An empty run lends nothing: none while another run holds the
        rest (paused for its slice: its records are booked from where it got), and none when
        every record was taken (the batch may still grow)."""
        if not self.taking or self.held_run:
            return range(0)
        if not self.busy or self.ordering == "none":
            stop = len(self.batch)
            if self.cursor <= self._last_passed:
                self._pass_finished()
                if self.cursor <= self._last_passed:
                    stop = self.done.find(1, self.cursor)  # the next one passed over
            run = range(self.cursor, stop)
            if not run:
                return run
            # The rest stays taken while the run holds it; `end_run()` gives it back.
            self.cursor = len(self.batch)
            self.held_run = True
        else:
            index = self.take()
            if index < 0:
                return range(0)
            run = range(index, index + 1)
        self.run_start = run.start
        return run

    def end_run(self, stop: int) -> None:
        """The run in place ended at ``stop``: the records before it finished, and those from
        ``stop`` on were not run, so they are not taken either (the one at ``stop`` stays
        taken if it started)."""
        self.in_place = -1
        self.held_run = False
        self._book(self.run_start, stop)
        self.run_start = stop
        self.cursor = min(self.cursor, stop + 1)

    def pause_run(self, at: int) -> None:
        """The run in place stops before ``at`` for a while, keeping its records from there:
        those before it finished."""
        self.in_place = -1
        self._book(self.run_start, at)
        self.run_start = at

    def give_back(self, index: int) -> None:
        """The records of the run in place from ``index`` on will not run: they are not taken
        (the run keeps them until it ends, so no other record was taken since)."""
        self.in_place = -1
        self.held_run = False
        self.cursor = min(self.cursor, index)

    def may_grow(self) -> bool:
        """Whether the batch may take the partition's next records into it now: it takes
        records, all of them are taken, some are unfinished (out, or queued behind their keys),
        and no run in place holds any (its records' keys are not busy: one of them in the new
        records could start before it)."""
        return (
            self.taking
            and not self.held_run
            and self.in_place < 0
            and self.cursor >= len(self.batch)
            and self.prefix < len(self.batch)
        )

    def grow(self) -> int:
        """The batch grew in place (see `PartitionStates.pick`): the records that came are
        taken after the others, and under ``"key"`` one whose key a record out has waits for
        it, as within one batch. Asked only after `may_grow()`.

        Returns:
            How many records came.
        """
        known = len(self.done)
        added = len(self.batch) - known
        self.done.extend(bytes(added))
        if self.asked == "key" and self._keys is not None:
            self._rekey(known)
        return added

    def _rekey(self, known: int) -> None:
        """Give the records from ``known`` on their keys, and make busy the key of a record out
        that had no other record before (it was not busy) and has one now."""
        batch, keys = self.batch, self._keys
        assert keys is not None
        if self._counts is None:
            # The first growth: the keys of the records before, as `_find_keys()` would.
            raws = [raw_key(batch[index]) for index in range(known)]
            self._counts = counts = Counter(raws)
            self._alone_at = {key: index for index, key in enumerate(raws) if counts[key] == 1}
        counts, alone_at = self._counts, self._alone_at
        assert alone_at is not None
        self.ordering = "key"  # it may have turned "none": its keys were all distinct
        self._rekeyed = True
        done, cursor = self.done, self.cursor
        for index in range(known, len(batch)):
            key = raw_key(batch[index])
            counts[key] += 1
            if counts[key] == 1:
                alone_at[key] = index
                keys.append(_ALONE)
                continue
            keys.append(key)
            first = alone_at.pop(key, None)
            if first is not None:
                keys[first] = key
                if first < cursor and not done[first]:
                    self.busy.setdefault(key, None)  # it is out: its key's records wait

    def exhausted(self) -> bool:
        """True once `take()` can return no record any more: it stopped taking, or every record
        was taken and no run in place holds the rest (a run that ends early, its record failed
        or waited, gives back the records it did not run, to be taken again)."""
        return not self.taking or (self.cursor >= len(self.batch) and not self.held_run)

    def put_out(self, index: int) -> Hashable:
        """The record at ``index``, taken, is out (see the module): its key is busy (unless
        no other record of the batch has it).

        Returns:
            Its key (None under ``"none"``, which has no busy keys), for `finished()`.
        """
        if self.ordering == "none":
            return None
        key = self._key(index)
        if key is not _ALONE and key not in self.busy:
            self.busy[key] = None
        return key

    def may_start(self, index: int) -> bool:
        """Whether the record at ``index`` may (still) start."""
        return not self.gone and (self.taking or index <= self.horizon)

    def in_handlers(self) -> list[Record]:
        """The records in a handler now: those running, and the one run in place."""
        found = [entry.record for entry in self.running]
        if self.in_place >= 0:
            found.append(self.batch[self.in_place])
        return found

    def drained(self) -> bool:
        """True once it stopped taking and every record that may start has finished."""
        return not self.taking and self.prefix > self.horizon and not self.running

    def finished(self, index: int, *, out: bool, key: Hashable = _UNKNOWN) -> tuple[int, int]:
        """The record at ``index`` finished; ``out`` says whether it was out, ``key`` what
        `put_out()` said of it then (found again when not given).

        Returns:
            The index of the next record of its key, now out, when one was queued behind it
            and may start (-1: none); and how many records the prefix passed since
            `take_grown()` was last asked (which this answers too).
        """
        # No run is in place: that is another worker's, whose records finish in place.
        self.done[index] = 1
        self._furthest = max(self._furthest, index)
        following = -1
        if out and self.ordering != "none":
            if key is _UNKNOWN or (self._rekeyed and (key is _ALONE or key is None)):
                key = self._key(index)
            if key is not _ALONE:
                waiting = self.busy[key]
                if waiting and self.may_start(waiting[0]):
                    following = waiting.popleft()
                else:
                    del self.busy[key]
        if index == self._prefix:
            self._advance(index + 1)
        grown, self._grown = self._grown, 0
        return following, grown

    def _book(self, start: int, stop: int) -> None:
        """The records from ``start`` to ``stop`` (of a run in place, never out) finished."""
        if start >= stop:
            return
        self.done[start:stop] = bytes([1]) * (stop - start)
        self._furthest = max(self._furthest, stop - 1)
        if start == self._prefix:
            self._advance(stop)

    def _advance(self, prefix: int) -> None:
        """Move the prefix to ``prefix`` and past the records finished after it."""
        done, size = self.done, len(self.batch)
        while prefix < size and done[prefix]:
            prefix += 1
        self._grown += prefix - self._prefix
        self._prefix = prefix

    def stop_taking(self, *, fill_gaps: bool) -> None:
        """Start no record beyond the horizon: with ``fill_gaps`` (a handover or a shutdown) the
        records before the last one finished or running still run; without (a record failed
        for good), nothing more starts."""
        self._catch_up()
        if self.taking:
            self.taking = False
            if fill_gaps:
                running = (entry.index for entry in self.running)
                self.horizon = max(self._furthest, self.in_place, *running)
        elif not fill_gaps:
            self.horizon = -1

    def give_up(self) -> None:
        """Nothing of it starts any more, and it never commits: given up (or settled)."""
        self.taking = False
        self.gone = True
