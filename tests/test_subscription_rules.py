"""The pure parts of subscriptions: the argument's checks, the registration as Kafka's ZooKeeper
consumer wrote it, which topics a pattern reads, the partition keys, and the key type mypy infers
from the form of ``topic`` (this file is type-checked with ``mypy --strict``)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from aio_cluster import (
    Batch,
    ConfigurationError,
    ConsumerGroup,
    GroupStatistics,
    RebalanceListener,
    TopicPartition,
)
from aio_cluster.assign.strategies import Strategy
from aio_cluster.assign.subscription import Subscription
from aio_cluster.kafka.topics import PARTITION_SPAN, PartitionKey, TopicKeys
from aio_cluster.zookeeper.layout import decode_registration, encode_registration


@pytest.mark.parametrize(
    ("topic", "options", "message"),
    [
        ([], {}, "list of topics is empty"),
        (["a", "b", "a"], {}, "topic 'a' is named twice"),
        (["a", "bad name"], {}, "topic name 'bad name' is not valid"),
        ("bad/name", {}, "topic name 'bad/name' is not valid"),
        (["a", 3], {}, "topic 3 in .* is not a str"),
        (3, {}, "topic must be a topic name, a list of names or a compiled re.Pattern, not 3"),
        ({"a"}, {}, "topic must be a topic name"),
        ("a", {"exclude": re.compile("b")}, "exclude=.* needs a topic pattern"),
        (["a"], {"exclude": re.compile("b")}, "exclude=.* needs a topic pattern"),
        (re.compile("a"), {"exclude": "b"}, "exclude must be a compiled re.Pattern"),
        (re.compile(b"a"), {}, "must be a str pattern"),
        (re.compile("a", re.IGNORECASE), {}, "flags its text does not carry"),
    ],
)
def test_bad_subscriptions_are_refused_at_construction(
    topic: object, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        ConsumerGroup("g", "127.0.0.1:1", "127.0.0.1:1", topic, **options)  # type: ignore[call-overload]


def test_a_list_is_recorded_as_a_static_subscription() -> None:
    doc = json.loads(encode_registration(Subscription.of(["a", "b"]), Strategy.STICKY, 7))
    assert doc["subscription"] == {"a": 1, "b": 1}
    assert doc["pattern"] == "static"
    info = decode_registration(json.dumps(doc).encode())
    assert info.topics == {"a", "b"}
    assert info.subscribes("a")
    assert not info.subscribes("c")


def test_a_pattern_is_recorded_as_a_white_list_with_its_exclusion_folded_in() -> None:
    subscription = Subscription.of(re.compile(r"events\..*"), re.compile(r"events\.old.*"))
    doc = json.loads(encode_registration(subscription, Strategy.STICKY, 7))
    assert doc["pattern"] == "white_list"
    ((regex, streams),) = doc["subscription"].items()
    assert streams == 1
    assert regex == r"(?!(?:events\.old.*)$)(?:events\..*)"
    info = decode_registration(json.dumps(doc).encode())
    assert info.topics == frozenset()  # a regex is no topic name (tools list topics by it)
    assert info.subscribes("events.orders")
    assert not info.subscribes("events.old-orders")
    assert not info.subscribes("xevents.orders")  # the whole name must match
    assert not info.subscribes("__consumer_offsets")


def test_black_lists_and_old_registrations_are_read() -> None:
    classic = b'{"version":1,"subscription":{"tmp.*":1},"pattern":"black_list","timestamp":"1"}'
    info = decode_registration(classic)
    assert info.subscribes("orders")
    assert not info.subscribes("tmp1")
    assert not info.subscribes("__transaction_state")
    old = b'{"version":1,"subscription":{"t":1},"pattern":"static","timestamp":"1"}'
    assert decode_registration(old).subscribes("t")
    assert not decode_registration(old).subscribes("u")
    unreadable = b'{"version":1,"subscription":{"(":1},"pattern":"white_list","timestamp":"1"}'
    assert not decode_registration(unreadable).subscribes("(")


def test_a_pattern_selects_the_matching_topics_sorted_and_a_list_keeps_its_own() -> None:
    pattern = Subscription.of(re.compile("a.*"))
    assert pattern.select(["b", "ab", "aa", "__consumer_offsets"]) == ["aa", "ab"]
    listed = Subscription.of(["z", "y"])
    assert listed.select(["a"]) == ["z", "y"]
    assert listed.many
    assert Subscription.of(["z"]).many
    assert not Subscription.of("z").many


def test_keys_of_one_topic_are_its_partition_ids() -> None:
    keys = TopicKeys(("t",))
    assert keys.key("t", 5) == 5
    assert keys.key("u", 5) == PARTITION_SPAN + 5
    assert keys.split(PartitionKey(PARTITION_SPAN + 5)) == TopicPartition("u", 5)
    assert keys.lookup("never", 0) is None
    assert keys.by_topic({keys.key("u", 1), keys.key("t", 3), keys.key("u", 0)}) == {
        "t": [3],
        "u": [0, 1],
    }
    with pytest.raises(KeyError):
        keys.split(PartitionKey(7 * PARTITION_SPAN))


class _Listener(RebalanceListener[TopicPartition]):
    async def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
        pass


async def _typed() -> None:  # never run: mypy checks what each form of ``topic`` infers
    one = ConsumerGroup("g", "b", "z", "t")
    listed = ConsumerGroup("g", "b", "z", ["t"], listener=_Listener())
    pattern = ConsumerGroup("g", "b", "z", re.compile("t.*"), exclude=re.compile("tx"))
    ids: list[int] = one.claimed
    tps: list[TopicPartition] = listed.claimed + pattern.paused()
    wrong: list[int] = listed.claimed  # type: ignore[assignment]
    listed.pause(0)  # type: ignore[arg-type]
    one.pause(TopicPartition("t", 0))  # type: ignore[arg-type]
    ConsumerGroup("g", "b", "z", "t", exclude=re.compile("x"))  # type: ignore[call-overload]
    ConsumerGroup("g", "b", "z", "t", listener=_Listener())  # type: ignore[arg-type]
    async for partition, batch in listed:
        named: TopicPartition = partition
        records: Batch = batch
        await listed.commit(named, records[-1].offset + 1)
    async for number, _batch in one:
        await one.seek(number, 0)
    stats: GroupStatistics[TopicPartition] = await pattern.statistics()
    first: TopicPartition = stats.partitions[0].partition
    del ids, tps, wrong, first
