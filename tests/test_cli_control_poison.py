"""A poison record under ``on_failure="stop"`` on a running group, against the real servers and
through the command as users run it: ``check`` names the record, ``skip`` shows the plan and,
with ``--execute``, moves the group past it; the record is never handled again and the
dead-letter topic has it, with the header saying who skipped it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from aio_cluster import Record
from aio_cluster.control.store import ControlStore
from aio_cluster.local import LocalCluster
from aio_cluster.member.controls import SKIPPED_BY
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from conftest import MakeTopic
from support import member, stored_offsets, wait_until
from test_cli import run

pytestmark = pytest.mark.asyncio

BY_HOST = f"@{socket.gethostname()}"
"""How every write of the command ends its ``by``: ``user@host``."""


async def test_a_poison_record_is_named_by_check_and_skipped_on_a_running_group(
    cluster: LocalCluster,
    zk: ZooKeeper,
    producer: AIOKafkaProducer,
    make_topic: MakeTopic,
    group_name: str,
) -> None:
    topic = await make_topic(partitions=1)
    dead = await make_topic(partitions=1)
    for i in range(10):
        value = b"poison" if i == 4 else b"%d" % i
        await producer.send_and_wait(topic, key=b"k%d" % i, value=value, partition=0)
    handled: list[int] = []
    attempts: list[int] = []

    async def handler(record: Record) -> None:
        attempts.append(record.offset)
        if record.value == b"poison":
            raise ValueError("poison")
        handled.append(record.offset)

    store = ControlStore(zk, group_name)
    layout = GroupLayout(group_name, topic)
    group = member(cluster, group_name, topic)
    async with group:
        task = asyncio.create_task(
            group.process(
                handler, concurrency=1, on_failure="stop", attempts=1, dead_letter_topic=dead
            )
        )
        try:

            async def stopped() -> bool:
                return (topic, 0) in (await store.read()).stopped

            await wait_until(stopped, what="the stop published")
            window = ("--window", "1s", "--samples", "2")
            code, out, err = await run(cluster, "check", group_name, *window, "--json")
            assert code == 2, err
            (finding,) = json.loads(out)
            assert (finding["status"], finding["severity"]) == ("stopped", "error")
            assert finding["stopped"]["offset"] == 4
            assert finding["stopped"]["member"] == group.id
            assert "poison" in finding["stopped"]["error"]
            code, out, err = await run(cluster, "check", group_name, *window)
            assert f"{topic}/0 stopped on offset 4 (" in out.splitlines()[-1]

            args = ("skip", group_name, "--topic", topic, "--partition", "0")
            code, out, err = await run(cluster, *args)
            assert code == 0, err
            assert f"{topic}/0 is stopped on offset 4 (" in out
            assert f"owner {group.id}" in out
            assert "offsets 4 to 4 (1 record) are never handled" in out
            assert (await store.read()).skips == {}

            code, out, err = await run(cluster, *args, "--execute")
            assert code == 0, err
            assert "requested" in out
            await wait_until(lambda: handled == [0, 1, 2, 3, 5, 6, 7, 8, 9], what="on past it")
            await wait_until(
                lambda: _stored_is(zk, layout, 10), what="stored to the end, past the poison"
            )
            code, out, err = await run(cluster, "describe", group_name, "--json")
            assert code == 0, err
            (row,) = json.loads(out)
            assert (row["committed"], row["lag"]) == (10, 0)
            assert (row["paused"], row["stopped"], row["skip"]) == (None, None, None)
            history = await store.history()
            assert [e.action for e in history] == ["skipped", "skip-requested"]
            by = history[1].by
            assert by.endswith(BY_HOST)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    assert attempts.count(4) == 1, "the skipped record was never handled again"

    consumer = AIOKafkaConsumer(
        dead, bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        letter = await asyncio.wait_for(consumer.getone(), 30)
    finally:
        await consumer.stop()
    assert (letter.offset, letter.value) == (0, b"poison")
    assert dict(letter.headers)[SKIPPED_BY].decode().startswith(f"{by} at ")


async def _stored_is(zk: ZooKeeper, layout: GroupLayout, offset: int) -> bool:
    return (await stored_offsets(zk, layout, 1)).get(0) == offset
