"""The names and values the OpenTelemetry messaging conventions (v1.44) give a Kafka consumer's
spans and metrics, and this library's own few, in one place; pure, so that tests read them
without servers and the spans' and metrics' modules never spell a name twice."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "BATCH_COUNT",
    "BATCH_FIRST_OFFSET",
    "BATCH_LAST_OFFSET",
    "BODY_COMPLETED",
    "CONSUMER_GROUP",
    "DESTINATION",
    "DURATION_BUCKETS",
    "ERROR_TYPE",
    "KAFKA",
    "MEMBER_ID",
    "MESSAGE_KEY",
    "OFFSET",
    "OPERATION_NAME",
    "OPERATION_TYPE",
    "PARTITION",
    "PROCESS_ATTEMPT",
    "REBALANCE_CLAIMED",
    "REBALANCE_KEPT",
    "REBALANCE_LISTENER_PARTITIONS",
    "REBALANCE_REVOKED",
    "SYSTEM",
    "error_type",
    "partition_attributes",
    "process_name",
]

SYSTEM = "messaging.system"
KAFKA = "kafka"
OPERATION_NAME = "messaging.operation.name"
OPERATION_TYPE = "messaging.operation.type"
DESTINATION = "messaging.destination.name"
PARTITION = "messaging.destination.partition.id"
CONSUMER_GROUP = "messaging.consumer.group.name"
OFFSET = "messaging.kafka.offset"
MESSAGE_KEY = "messaging.kafka.message.key"
BATCH_COUNT = "messaging.batch.message_count"
ERROR_TYPE = "error.type"

MEMBER_ID = "aio_cluster.member.id"
"""The member that processed: a group's members share every conventional attribute."""
PROCESS_ATTEMPT = "aio_cluster.process.attempt"
"""Which run of a record's handler a span is: 1, then one more per retry."""
BATCH_FIRST_OFFSET = "aio_cluster.batch.first_offset"
BATCH_LAST_OFFSET = "aio_cluster.batch.last_offset"
"""A batch's first and last offsets: the conventions' ``messaging.kafka.offset`` is one
record's."""
REBALANCE_REVOKED = "aio_cluster.rebalance.revoked"
"""The partitions a rebalance released, as ``topic/partition`` strings."""
REBALANCE_CLAIMED = "aio_cluster.rebalance.claimed"
"""The partitions a rebalance claimed, as ``topic/partition`` strings."""
REBALANCE_KEPT = "aio_cluster.rebalance.kept"
"""Partitions a rebalance had to keep: a cancelled handler of theirs still ran."""
REBALANCE_LISTENER_PARTITIONS = "aio_cluster.rebalance.listener.partitions"
"""The partitions a listener call was given, as ``topic/partition`` strings."""
BODY_COMPLETED = "aio_cluster.body.completed"
"""Whether an ``async for`` body ran to its end (False: it raised or broke; uncommitted)."""

DURATION_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
)
"""The bucket bounds (seconds) the conventions advise for ``messaging.process.duration``."""


def process_name(topic: str) -> str:
    """A process span's name: ``process <topic>``."""
    return f"process {topic}"


def partition_attributes(group: str, topic: str, partition: int) -> Mapping[str, str | int]:
    """The attributes every span and metric of one partition carries."""
    return {
        SYSTEM: KAFKA,
        OPERATION_NAME: "process",
        OPERATION_TYPE: "process",
        CONSUMER_GROUP: group,
        DESTINATION: topic,
        PARTITION: str(partition),
    }


def error_type(error: BaseException) -> str:
    """``error.type`` of an exception: its class's fully qualified name, as the conventions say
    (a builtin's bare name)."""
    cls = type(error)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"
