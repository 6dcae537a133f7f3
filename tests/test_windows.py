"""The pure bookkeeping of process()'s running batches (`aio_cluster.member.processing.windows`):
which records may start, in which order, and how far the completed prefix got. A hypothesis machine
plays the workers: records taken and finished at once, records put out (a handler that waits)
and finished later in any order, and a stop."""

from __future__ import annotations

from collections import deque
from typing import Any

from aiokafka.structs import ConsumerRecord
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from aio_cluster.config import Ordering
from aio_cluster.kafka.records import Record
from aio_cluster.kafka.topics import PartitionKey
from aio_cluster.member.delivery.claims import Claim
from aio_cluster.member.processing.windows import Entry, Window


def records(keys: list[bytes | None], start: int = 0) -> list[Record]:
    """Records of partition 0 with these keys, from offset ``10 + start``."""
    fields: dict[str, Any] = {
        "topic": "t",
        "partition": 0,
        "timestamp": 0,
        "timestamp_type": 0,
        "value": b"",
        "checksum": None,
        "serialized_key_size": -1,
        "serialized_value_size": -1,
        "headers": (),
    }
    return [ConsumerRecord(offset=10 + start + i, key=key, **fields) for i, key in enumerate(keys)]


def window(keys: list[bytes | None], ordering: Ordering = "key") -> Window:
    return Window(Claim(PartitionKey(0), 0, 10, 10), records(keys), ordering)


def test_a_record_whose_key_is_out_waits_behind_it_and_the_prefix_follows() -> None:
    w = window([b"a", b"b", b"a", None, None])
    assert w.take() == 0
    w.put_out(0)
    assert w.take() == 1, "b is not busy"
    assert w.take() == 3, "record 2 (a) waits behind record 0; no key is a key too"
    assert w.finished(1, out=False)[0] == -1
    assert w.prefix == 0, "record 0 is not finished: the prefix stays"
    assert w.take() == 4, "record 3 was finished at once, not out: None is not busy"
    assert w.take() == -1
    w.finished(3, out=False)
    assert w.finished(0, out=True)[0] == 2, "a's next record, handed on"
    assert w.prefix == 2
    assert w.unfinished == 3
    assert w.busy == {b"a": deque()}, "record 2 is out in its turn"


def test_a_key_no_other_record_of_the_batch_has_is_never_busy() -> None:
    w = window([b"a", b"b", b"a", b"c"])
    assert w.take() == 0
    w.put_out(0)
    assert w.take() == 1
    assert w.put_out(1) is not None
    assert list(w.busy) == [b"a"], "b is out, but nothing of the batch could wait behind it"
    assert w.take() == 3, "record 2 (a) waits behind record 0"
    w.put_out(3)
    assert w.finished(1, out=True) == (-1, 0), "record 0 is not finished: the prefix stays"
    assert w.finished(0, out=True) == (2, 2), "a's next record, handed on; records 0, 1 done"
    assert list(w.busy) == [b"a"]


def test_a_batch_of_distinct_keys_runs_in_place_while_records_are_out() -> None:
    w = window([b"a", b"b", b"c", b"d"])
    assert w.take() == 0
    w.put_out(0)  # record 0's handler waits
    assert not w.busy
    assert w.begin_run() == range(1, 4), "no record of the batch could follow record 0's key"


def test_a_run_in_place_books_its_records_when_someone_looks() -> None:
    w = window([b"a", b"a", b"b", b"c"])
    run = w.begin_run()
    assert run == range(4), "nothing is out: the rest of the batch"
    w.in_place = 2
    assert w.prefix == 2, "records 0 and 1 finished, record 2 runs"
    w.stop_taking(fill_gaps=True)
    assert w.horizon == 2, "the record in place counts as running"
    assert not w.drained()
    w.end_run(3)
    assert w.prefix == 3
    assert w.drained()
    assert w.cursor == 4, "record 3 stays taken (its worker runs it the full way)"


def test_a_run_that_stops_gives_back_the_records_after_it() -> None:
    w = window([b"a", b"b", b"c", b"d"])
    assert w.begin_run() == range(4)
    assert w.take() == -1, "the run holds the rest"
    assert not w.exhausted(), "lent to the run, not taken for good: the workers look again"
    w.in_place = 1
    w.end_run(1)
    w.put_out(1)  # record 1's handler waits
    assert w.prefix == 1
    assert w.take() == 2, "records 2 and 3 are taken again"
    assert w.begin_run() == range(3, 4), "a record is out: one record at a time"


def test_a_run_lends_the_rest_once_and_an_empty_run_lends_nothing() -> None:
    """Two records taken apart (held back while ZooKeeper was silent, say) run on two workers:
    the first one's run in place takes the rest and pauses for its slice; the second one's run
    gets nothing, and leaves the paused run's booking alone (before: it moved where that run
    books from, so the records it ran after its pause were never booked, and the prefix stuck
    for good). A run with nothing left to take holds nothing: the batch may still grow."""
    w = window([b"a", b"b", b"c", b"d"], "none")
    assert (w.take(), w.take()) == (0, 1)
    w.finished(0, out=False)
    assert w.begin_run() == range(2, 4)
    w.in_place = 3
    w.pause_run(3)
    w.finished(1, out=False)
    assert w.begin_run() == range(0), "the rest is the paused run's"
    w.in_place = 3
    w.end_run(4)
    assert w.prefix == 4, "the paused run's records are booked"
    waits = window([b"a", b"b"], "none")
    assert (waits.take(), waits.take()) == (0, 1)
    waits.put_out(1)  # record 1's handler waits
    waits.finished(0, out=False)
    assert waits.begin_run() == range(0)
    assert waits.may_grow(), "record 1 waits: the records after it may come"


def test_partition_ordering_takes_nothing_while_a_record_is_out_and_none_takes_all() -> None:
    w = window([b"a", b"b", b"c"], "partition")
    assert w.take() == 0
    w.put_out(0)
    assert w.take() == -1
    assert w.begin_run() == range(0)
    assert w.finished(0, out=True)[0] == -1
    assert w.take() == 1
    free = window([b"a", b"a", b"a"], "none")
    for index in range(3):
        assert free.take() == index
        free.put_out(index)
    assert free.take() == -1
    assert free.exhausted()


def test_a_window_that_stops_taking_fills_the_gaps_before_its_furthest_record() -> None:
    w = window([b"a", b"a", b"b", b"c", b"d"])
    assert w.take() == 0
    w.put_out(0)
    assert w.take() == 2, "record 1 waits behind record 0"
    w.finished(2, out=False)
    assert w.take() == 3
    w.finished(3, out=False)
    w.stop_taking(fill_gaps=True)
    assert w.horizon == 3
    assert [w.may_start(i) for i in range(5)] == [True, True, True, True, False]
    assert w.take() == -1
    assert not w.drained()
    assert w.finished(0, out=True)[0] == 1, "record 1 is before the horizon: it still runs"
    w.finished(1, out=True)
    assert w.prefix == 4, "the prefix passes every finished record"
    assert w.drained()


def test_a_failed_record_stops_everything_after_it() -> None:
    w = window([b"a", b"a"])
    assert w.take() == 0
    w.put_out(0)
    w.stop_taking(fill_gaps=True)
    w.stop_taking(fill_gaps=False)
    assert not w.may_start(1)
    assert w.finished(0, out=True)[0] == -1, "its key hands on nothing"
    w.give_up()
    assert w.take() == -1


def test_records_finished_before_the_batch_came_are_passed_over() -> None:
    w = window([b"a", b"b", b"c", b"d", b"e"])
    w.pass_over([2, 3])
    assert w.prefix == 0
    assert w.begin_run() == range(2), "a run stops before the first record passed over"
    w.end_run(2)
    assert w.prefix == 4, "the prefix passes the records passed over"
    assert w.take_grown() == 4
    assert w.begin_run() == range(4, 5)
    keyed = window([b"a", b"a", b"b", b"b", b"c"])
    keyed.pass_over([0, 3])
    assert keyed.prefix == 1
    assert keyed.take() == 1
    keyed.put_out(1)
    assert keyed.take() == 2
    keyed.put_out(2)
    assert keyed.take() == 4, "record 3 (b) is passed over, not queued behind record 2"
    assert keyed.finished(2, out=True)[0] == -1, "b hands on nothing"


def test_the_records_finished_past_the_prefix_are_found() -> None:
    w = window([b"a", b"b", b"c", b"d"])
    assert w.take() == 0
    w.put_out(0)
    assert w.begin_run() == range(1, 4)
    w.end_run(4)
    assert w.prefix == 0
    assert w.finished_beyond() == [1, 2, 3]


KEYS = [b"a", b"b", b"c", None]


def test_a_grown_batch_waits_behind_a_record_out_whose_key_had_no_other() -> None:
    """Record 0 (a) went out while no other record of the batch had its key (never busy, its
    batch of distinct keys ran under "none"); the batch grows by another record of key a: that
    one waits for record 0, and is handed on once it finished."""
    w = window([b"a", b"b"])
    assert w.take() == 0
    alone = w.put_out(0)
    assert w.take() == 1
    w.finished(1, out=False)
    assert w.may_grow(), "every record taken, record 0 still out"
    w.batch.extend(records([b"a", b"c"], start=2))
    assert w.grow() == 2
    assert w.take() == 3, "record 2 (a) waits behind record 0"
    assert w.finished(0, out=True, key=alone)[0] == 2, "a's next record, handed on"


def test_a_batch_grows_only_with_every_record_taken_and_no_run_in_place() -> None:
    w = window([b"a", b"b", b"c"])
    assert not w.may_grow(), "records not taken yet"
    run = w.begin_run()
    assert run == range(0, 3)
    assert not w.may_grow(), "a run in place holds them"
    w.in_place = 1
    w.end_run(1)  # record 1's handler waits: it is out
    w.put_out(1)
    assert w.take() == 2
    w.finished(2, out=False)
    assert w.may_grow()
    w.finished(1, out=True)
    assert not w.may_grow(), "every record finished: the batch ends instead"


class WindowMachine(RuleBasedStateMachine):
    """Workers taking records of one batch: each record taken runs once; a key's records (a
    partition's, under ``"partition"``) never run side by side and run in offset order; the
    prefix is the first unfinished record."""

    @initialize(
        keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=30),
        ordering=st.sampled_from(["key", "partition", "none"]),
        passed=st.sets(st.integers(0, 29)),
    )
    def start(self, keys: list[bytes | None], ordering: Ordering, passed: set[int]) -> None:
        self.keys = keys
        self.ordering = ordering
        self.window = window(keys, ordering)
        self.passed = sorted(index for index in passed if index < len(keys))
        """Records that finished before the batch came (`Window.pass_over()`)."""
        self.window.pass_over(self.passed)
        self.out: dict[int, Entry] = {}
        """Records put out and running (as the processor keeps them in `Window.running`)."""
        self.started: list[int] = []
        self.finished: set[int] = set(self.passed)
        self.grown = 0
        """What the window said its prefix grew by, in all."""

    def key(self, index: int) -> object:
        return 0 if self.ordering == "partition" else self.keys[index]

    def begin(self, index: int) -> None:
        assert index not in self.started, f"record {index} started twice"
        assert index not in self.passed, f"record {index} started, though finished before"
        assert self.window.may_start(index)
        if self.ordering != "none":
            clash = [i for i in self.out if self.key(i) == self.key(index)]
            assert not clash, f"record {index} beside {clash}, of its key"
            earlier = [i for i in range(index) if self.key(i) == self.key(index)]
            assert set(earlier) <= self.finished, f"record {index} before its key's earlier ones"
        self.started.append(index)

    def finish(self, index: int, *, out: bool, entry: Entry | None = None) -> None:
        """``entry``: the record's, when it was out (its key as it was put out, which the
        processor gives back, though the batch may have grown since)."""
        if entry is None:
            following, grown = self.window.finished(index, out=out)
        else:
            following, grown = self.window.finished(index, out=out, key=entry.key)
        self.grown += grown
        self.finished.add(index)
        if following >= 0:
            assert entry is not None
            self.begin(following)
            self.went_out(following, entry.key)

    def went_out(self, index: int, key: object) -> None:
        self.out[index] = Entry(self.window, index, out=True, key=key)
        self.window.running.add(self.out[index])

    def came_back(self, index: int) -> Entry:
        entry = self.out.pop(index)
        self.window.running.discard(entry)
        return entry

    @rule()
    def take_and_finish_at_once(self) -> None:
        index = self.window.take()
        if index >= 0:
            self.begin(index)
            self.finish(index, out=False)

    @rule()
    def take_and_wait(self) -> None:
        index = self.window.take()
        if index >= 0:
            self.begin(index)
            self.went_out(index, self.window.put_out(index))

    @rule(data=st.data())
    def run_in_place(self, data: st.DataObject) -> None:
        """A worker runs records in place; the last one it reaches may wait, or go the full
        way; others look at the window in between."""
        run = self.window.begin_run()
        if not run:
            return
        ran = data.draw(st.integers(0, len(run)))
        for index in run[:ran]:
            if index > run.start and data.draw(st.booleans()):
                self.window.pause_run(index)  # its slice is over: other tasks run a while
                self.the_prefix_is_the_first_unfinished_record()
                assert self.window.take() == -1, "the rest of the run stays taken"
            self.begin(index)
            self.window.in_place = index
            if data.draw(st.booleans()):
                self.the_prefix_is_the_first_unfinished_record()
            self.finished.add(index)
        if ran == len(run):
            self.window.end_run(run.stop)
            return
        index = run[ran]
        self.begin(index)
        self.window.end_run(index)
        if data.draw(st.booleans()):
            self.went_out(index, self.window.put_out(index))
        else:
            self.finish(index, out=False)

    @precondition(lambda self: self.out)
    @rule(data=st.data())
    def a_waiting_record_finishes(self, data: st.DataObject) -> None:
        index = data.draw(st.sampled_from(sorted(self.out)))
        self.finish(index, out=True, entry=self.came_back(index))

    @precondition(lambda self: self.window.may_grow())
    @rule(more=st.lists(st.sampled_from(KEYS), min_size=1, max_size=10))
    def grow(self, more: list[bytes | None]) -> None:
        """The partition's next records come into the running batch (`Window.grow()`)."""
        self.window.batch.extend(records(more, len(self.keys)))
        self.keys.extend(more)
        assert self.window.grow() == len(more)

    @precondition(lambda self: self.window.taking)
    @rule()
    def stop(self) -> None:
        self.window.stop_taking(fill_gaps=True)

    @invariant()
    def the_growth_told_adds_up_to_the_prefix(self) -> None:
        self.grown += self.window.take_grown()
        assert self.grown == self.window.prefix

    @invariant()
    def the_prefix_is_the_first_unfinished_record(self) -> None:
        unfinished = [i for i in range(len(self.keys)) if i not in self.finished]
        assert self.window.prefix == (unfinished[0] if unfinished else len(self.keys))

    def teardown(self) -> None:
        while self.out:
            index = min(self.out)
            self.finish(index, out=True, entry=self.came_back(index))
        while (index := self.window.take()) >= 0:
            self.begin(index)
            self.finish(index, out=False)
        if self.window.taking:
            every = [index for index in range(len(self.keys)) if index not in self.passed]
            assert sorted(self.started) == every, "every record ran, but those passed over"
        else:
            assert self.window.prefix > self.window.horizon, "the gaps were filled"
        assert not self.window.busy


WindowMachine.TestCase.settings = settings(
    max_examples=3 * settings().max_examples, stateful_step_count=40, deadline=None
)  # three times the profile's cases: 300, or 30 under the compat profile (tests/conftest.py)
test_window_machine = WindowMachine.TestCase
