"""PartitionNames: the user's names of partitions turned into keys and back (pure logic)."""

from __future__ import annotations

import re

import pytest

from aio_cluster import ConfigurationError, NotOwnedError, TopicPartition
from aio_cluster.assign.subscription import Subscription
from aio_cluster.kafka.topics import PartitionKey, TopicKeys
from aio_cluster.member.naming import UNKNOWN, PartitionNames
from aio_cluster.member.protocol.keyed_layout import KeyedLayout


def names_of(topic: object) -> PartitionNames[object]:
    subscription = Subscription.of(topic)
    layout = KeyedLayout("g", TopicKeys(subscription.topics), many=subscription.many)
    return PartitionNames(layout, subscription)


def test_a_one_topic_member_names_partitions_by_id() -> None:
    names = names_of("orders")
    assert names.key(3) == PartitionKey(3)
    assert names.key(-5) == UNKNOWN, "a negative id names no partition, as with many topics"
    assert names.name(PartitionKey(3)) == 3
    assert names.names([PartitionKey(2), PartitionKey(0)]) == [0, 2]
    for wrong in (True, "3", TopicPartition("orders", 3)):
        with pytest.raises(ConfigurationError, match="names a partition by its id"):
            names.key(wrong)


def test_a_many_topic_member_names_partitions_by_topic_partition() -> None:
    names = names_of(["orders", "refunds"])
    key = names.key(TopicPartition("refunds", 1))
    assert names.name(key) == TopicPartition("refunds", 1)
    assert names.key(TopicPartition("elsewhere", 1)) == UNKNOWN, "a topic it does not read"
    assert names.key(TopicPartition("orders", -1)) == UNKNOWN
    for wrong in (1, ("orders", True), ("orders",)):
        with pytest.raises(ConfigurationError, match="TopicPartition"):
            names.key(wrong)


def test_a_pattern_member_gives_a_topic_it_reads_a_key_before_meeting_it() -> None:
    names = names_of(re.compile(r"orders\..*"))
    key = names.key(TopicPartition("orders.eu", 2))
    assert key != UNKNOWN
    assert names.name(key) == TopicPartition("orders.eu", 2)
    assert names.key(TopicPartition("payments", 2)) == UNKNOWN
    with pytest.raises(ConfigurationError):
        names.key(TopicPartition("orders.bad/name", 0))  # a name no layout takes


def test_the_not_owned_error_names_the_partition_as_the_user_does() -> None:
    assert str(names_of("orders").not_owned(3, "m-1")) == (
        "partition 3 of 'orders' is not owned by member m-1"
    )
    error = names_of(["a", "b"]).not_owned(TopicPartition("b", 0), "m-1", ": gone")
    assert isinstance(error, NotOwnedError)
    assert str(error) == (
        "partition TopicPartition(topic='b', partition=0) is not owned by member m-1: gone"
    )
