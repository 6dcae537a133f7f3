"""What an operator reads across both servers, shared by the command's subcommands and the
dashboard: the clients opened from a `Connection`, one look at a group (its members, a lag row
per partition, notes on what is not shown), and the inputs of one topic's reset plan.
ZooKeeper's single reads are `aio_cluster.operator.survey`'s; what is made of them is computed
in `aio_cluster.operator.plans`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from dataclasses import replace
from typing import TypeVar

from ..control.store import ControlStore
from ..errors import AccessDeniedError, ConfigurationError
from ..kafka.group_offsets import KafkaGroupOffsets
from ..kafka.offset_reader import OffsetReader
from ..kafka.topics import TopicKeys, TopicPartition
from ..zookeeper.client import ZooKeeper
from ..zookeeper.layout import GroupLayout, Registration
from . import survey
from .connection import Connection
from .environment import AUTH_VAR, PROG
from .plans import (
    LagRow,
    PlanRow,
    ResetTarget,
    ToTime,
    Unreadable,
    lag_rows,
    plan_reset,
    select_partitions,
    unreadable_note,
)

__all__ = [
    "Look",
    "by_partition",
    "kafka_follows",
    "look",
    "open_kafka",
    "open_zookeeper",
    "plan_topic",
    "refusable",
]

T = TypeVar("T")

KAFKA_TIMEOUT = 30.0
"""Seconds the reset waits for Kafka's group offsets to be read and written."""


@contextlib.asynccontextmanager
async def open_zookeeper(connection: Connection) -> AsyncIterator[ZooKeeper]:
    security = connection.security
    zk = ZooKeeper(
        connection.zookeeper_address(),
        request_timeout=connection.timeout,
        auth=security.auth,
        acl=security.acl,
        tls=security.tls,
    )
    await zk.start()
    try:
        yield zk
    finally:
        await zk.close()


@contextlib.asynccontextmanager
async def open_kafka(connection: Connection) -> AsyncIterator[OffsetReader]:
    reader = OffsetReader(
        connection.bootstrap_address(),
        client_id=PROG,
        request_timeout_ms=int(connection.timeout * 1000),
        options=connection.kafka,
    )
    await reader.start()
    try:
        yield reader
    finally:
        await reader.stop()


Look = tuple[dict[str, Registration | None], list[LagRow], list[str]]
"""One look at a group: its members, a row per partition, and notes on what is not shown."""


async def look(
    zk: ZooKeeper,
    kafka: OffsetReader,
    group: str,
    topics: Sequence[str] | None,
    store: ControlStore | None = None,
) -> Look:
    """One look at a group: the named topics, else every topic it holds, each partition with
    the operator's controls of it. A topic named that Kafka does not have is an error; one only
    found in ZooKeeper (deleted since, say) is a note, so that the others are still shown; so is
    a control node that cannot be read. ``store`` is the group's control store where the caller
    keeps one across looks (the dashboard), so that such a node is warned of once, not at every
    look."""
    members = await survey.read_members(zk, group)
    store = store or ControlStore(zk, group)
    controls = await store.read()
    shown = (
        list(dict.fromkeys(topics))
        if topics
        else await survey.group_topics(zk, group, members.values())
    )
    rows: list[LagRow] = []
    notes = [unreadable_note(path, why) for path, why in sorted(controls.unreadable.items())]
    marks, bad_marks = await survey.read_marks(zk, group)
    notes += bad_marks
    for name in shown:
        layout = GroupLayout(group, name)
        try:
            partitions = await kafka.partitions(name)
        except ConfigurationError:
            if topics:
                raise
            notes.append(
                f"topic {name} does not exist in Kafka: the group's nodes of it are not shown"
            )
            continue
        bounds = by_partition(await kafka.bounds({name: partitions}))
        stored = await survey.read_stored(zk, layout)
        owners = await survey.read_owners(zk, layout)
        rows += lag_rows(name, owners, stored, bounds, controls, marks)
        notes += [
            f"offset node {name}/{p} holds {value.data[:40]!r}, not an offset: repair it with "
            "reset-offsets"
            for p, value in sorted(stored.items())
            if isinstance(value, Unreadable)
        ]
    rows, unreadable = await _with_stuck(store, rows)
    notes += [unreadable_note(path, why) for path, why in sorted(unreadable.items())]
    return members, rows, notes


async def _with_stuck(
    store: ControlStore, rows: list[LagRow]
) -> tuple[list[LagRow], dict[str, str]]:
    """``rows`` with the stuck marks of their partitions (how long each has run counted by this
    machine's clock against the member's), and the stuck nodes that could not be read."""
    stuck, unreadable = await store.read_stuck()
    now = time.time()
    marked = []
    for row in rows:
        mark = stuck.get((row.topic, row.partition))
        marked.append(
            row if mark is None else replace(row, stuck=mark, stuck_for=max(now - mark.since, 0))
        )
    return marked, unreadable


def by_partition(found: Mapping[TopicPartition, T]) -> dict[int, T]:
    """One topic's answer of the offset reader, by partition id."""
    return {tp.partition: value for tp, value in found.items()}


async def refusable(path: str, write: Awaitable[T]) -> T:
    """``write``, with ZooKeeper's ACL refusal said in the command's words."""
    try:
        return await write
    except AccessDeniedError:
        raise AccessDeniedError(
            f"refused by ZooKeeper: the ACL of {path} does not let this session "
            f"change it; pass the group's credentials (${AUTH_VAR} or --zookeeper-auth-file)"
        ) from None


async def plan_topic(
    zk: ZooKeeper,
    kafka: OffsetReader,
    layout: GroupLayout,
    target: ResetTarget,
    wanted: Sequence[int] | None,
    *,
    execute: bool,
) -> tuple[list[PlanRow], dict[int, int]]:
    """One topic's plan, and the versions of the offset nodes it was made from. Before an
    ``execute`` every fence exists, so that the write bumps it whatever claims come meanwhile."""
    topic = layout.topic
    partitions = select_partitions(await kafka.partitions(topic), wanted)
    if execute:
        await refusable(layout.offsets, survey.ensure_fences(zk, layout, partitions))
    bounds = by_partition(await kafka.bounds({topic: partitions}))
    at_time = None
    if isinstance(target, ToTime):
        at_time = by_partition(
            await kafka.offsets_for_time({topic: partitions}, target.timestamp_ms)
        )
    nodes = await survey.read_offset_nodes(zk, layout)
    stored = {p: value for p, (value, _version) in nodes.items()}
    return (
        plan_reset(target, stored, bounds, at_time),
        {p: version for p, (_value, version) in nodes.items()},
    )


async def kafka_follows(
    connection: Connection, group: str, plans: Mapping[str, Sequence[PlanRow]]
) -> int:
    """After a reset stored in ZooKeeper: move the group's offsets in Kafka too, for the
    partitions where Kafka holds one (an exactly-once group's claims start from Kafka's
    committed offset, which would otherwise win over the reset; a mirrored group's tools would
    show the old one). Partitions without a Kafka offset are left without.

    Returns:
        How many partitions' Kafka offsets were moved.

    Raises:
        BrokerError: Kafka did not answer (ZooKeeper holds the reset already).
    """
    keys = TopicKeys(tuple(plans))
    offsets = KafkaGroupOffsets(
        connection.bootstrap_address(), group, keys, client_id=PROG, options=connection.kafka
    )
    await offsets.start()
    try:
        wanted = {
            keys.key(topic, row.partition): row.new for topic, plan in plans.items() for row in plan
        }
        held = await offsets.committed(list(wanted), KAFKA_TIMEOUT)
        moved = {key: offset for key, offset in wanted.items() if key in held}
        await offsets.commit(moved, KAFKA_TIMEOUT)
        return len(moved)
    finally:
        await offsets.stop()
