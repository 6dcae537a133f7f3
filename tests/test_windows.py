"""The pure bookkeeping of process()'s running batches (`aio_cluster.member.windows`): which
records may start, in which order, and how far the completed prefix got."""

from __future__ import annotations

from typing import Any

from aiokafka.structs import ConsumerRecord

from aio_cluster.config import Ordering
from aio_cluster.kafka.records import Record
from aio_cluster.kafka.topics import PartitionKey
from aio_cluster.member.claims import Claim
from aio_cluster.member.windows import Window


def window(keys: list[bytes | None], ordering: Ordering = "key") -> Window:
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
    batch: list[Record] = [
        ConsumerRecord(offset=10 + i, key=key, **fields) for i, key in enumerate(keys)
    ]
    return Window(Claim(PartitionKey(0), 0, 10, 10), batch, ordering)


def test_a_keys_records_start_one_after_another_and_the_prefix_follows() -> None:
    w = window([b"a", b"b", b"a", None, None])
    assert [e.index for e in w.first()] == [0, 1, 3], "the first of each key; no key is a key"
    following, grown = w.finished(1)
    assert following is None
    assert grown == 0, "record 0 is not finished: the prefix stays"
    following, grown = w.finished(0)
    assert following is not None
    assert following.index == 2, "a's next record"
    assert grown == 2
    assert w.prefix == 2
    assert w.unfinished == 3


def test_partition_ordering_starts_one_record_at_a_time_and_none_all_at_once() -> None:
    assert [e.index for e in window([b"a", b"b", b"c"], "partition").first()] == [0]
    assert [e.index for e in window([b"a", b"a", b"a"], "none").first()] == [0, 1, 2]


def test_a_window_that_stops_taking_fills_the_gaps_before_its_furthest_record() -> None:
    w = window([b"a", b"a", b"b", b"c", b"d"])
    w.first()
    for index in (2, 3):
        w.finished(index)
    w.stop_taking(fill_gaps=True)
    assert w.horizon == 3
    assert [w.may_start(i) for i in range(5)] == [True, True, True, True, False]
    assert not w.drained()
    w.finished(0)
    w.finished(1)
    assert w.prefix == 4, "the prefix passes every finished record"
    assert w.drained()


def test_a_failed_record_stops_everything_after_it() -> None:
    w = window([b"a", b"b"])
    w.first()
    w.stop_taking(fill_gaps=True)
    w.stop_taking(fill_gaps=False)
    assert not w.may_start(0)
    w.give_up()
    assert w.gone
