"""``aio-cluster pause``, ``resume`` and ``skip`` against the real servers, run as users run
them: the writes they make, what ``describe`` and ``check`` show of them, and bad input refused
in one line with nothing changed (a poison record skipped on a running group is in
``test_cli_control_poison.py``)."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from aio_cluster import ConsumerGroup
from aio_cluster.control.model import Controls, format_at
from aio_cluster.control.store import ControlStore
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from conftest import MakeTopic, Produce
from support import closable, member, stored_offsets
from test_cli import one_line, run

pytestmark = pytest.mark.asyncio

BY_HOST = f"@{socket.gethostname()}"
"""How every write of the command ends its ``by``: ``user@host``."""


@pytest_asyncio.fixture
async def idle(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, group_name: str
) -> AsyncIterator[ConsumerGroup]:
    """A joined member that read and committed the first 20 records of a 2-partition topic and
    reads no more, 10 more produced since: it owns both partitions, whose offsets stay."""
    topic = await make_topic(partitions=2)
    await produce(topic, 20)
    async with member(cluster, group_name, topic) as group:
        seen = 0
        async with contextlib.aclosing(closable(group.batches(commit=False))) as batches:
            async for partition, batch in batches:
                await group.commit(partition, batch[-1].offset + 1)
                seen += len(batch)
                if seen == 20:
                    break
        await produce(topic, 10, start=20)
        yield group


async def test_pause_shows_in_describe_and_check_and_resume_lifts_it(
    cluster: LocalCluster, zk: ZooKeeper, idle: ConsumerGroup
) -> None:
    group, topic = idle.name, idle.topic
    store = ControlStore(zk, group)

    code, out, err = await run(cluster, "pause", group, "--topic", topic, "--partition", "1")
    assert code == 0, err
    assert f"paused 1 partition(s) of group {group}" in out
    pause = (await store.read()).paused[(topic, 1)]
    assert list((await store.read()).paused) == [(topic, 1)]
    assert pause.by.endswith(BY_HOST)

    code, out, err = await run(cluster, "describe", group, "--json")
    assert code == 0, err
    rows = {row["partition"]: row for row in json.loads(out)}
    assert rows[0]["paused"] is None
    assert rows[1]["paused"] == {"by": pause.by, "at": format_at(pause.at)}
    code, out, err = await run(cluster, "describe", group)
    assert code == 0, err
    (shown,) = [line for line in out.splitlines() if line.split()[:2] == [topic, "1"]]
    assert f"paused by {pause.by} at {format_at(pause.at)}" in shown

    # Neither partition's offset moves (the member reads no more): the unpaused one is
    # stalled, the paused one is paused, its own verdict, never stalled.
    window = ("--window", "1s", "--samples", "2")
    code, out, err = await run(cluster, "check", group, *window, "--json")
    assert code == 2, err
    found = {f["partition"]: f for f in json.loads(out)}
    assert (found[0]["status"], found[0]["severity"]) == ("stalled", "error")
    assert (found[1]["status"], found[1]["severity"], found[1]["reasons"]) == (
        "paused",
        "warning",
        ["paused"],
    )
    assert found[1]["paused"] == {"by": pause.by, "at": format_at(pause.at)}
    code, out, _err = await run(cluster, "check", group, *window)
    assert f"{topic}/1 paused by {pause.by}" in out.splitlines()[-1]

    # Everything the group reads: only partition 0 is new.
    code, out, err = await run(cluster, "pause", group)
    assert code == 0, err
    assert f"paused 1 partition(s) of group {group}; 1 paused already" in out
    paused = (await store.read()).paused
    assert sorted(paused) == [(topic, 0), (topic, 1)]
    assert paused[(topic, 1)] == pause, "a pause in force is left as it is"

    code, out, err = await run(cluster, "resume", group, "--partition", "0")
    assert code == 0, err
    assert f"resumed 1 partition(s) of group {group}" in out
    assert list((await store.read()).paused) == [(topic, 1)]

    code, out, err = await run(cluster, "resume", group, "--json")
    assert code == 0, err
    assert json.loads(out) == [
        {"topic": topic, "partition": 1, "by": pause.by, "at": format_at(pause.at)}
    ]
    assert await store.read() == Controls()
    history = [(e.action, e.partition) for e in await store.history()]
    assert history == [("resume", 1), ("resume", 0), ("pause", 0), ("pause", 1)]


async def test_bad_input_is_one_line_and_changes_nothing(
    cluster: LocalCluster, zk: ZooKeeper, idle: ConsumerGroup
) -> None:
    group, topic = idle.name, idle.topic
    refused = [
        (("pause", "no-such-group"), "group 'no-such-group' does not exist"),
        (("pause", group, "--topic", "no-such-topic"), "no-such-topic"),
        (
            ("pause", group, "--topic", topic, "--partition", "0", "--partition", "7"),
            f"topic {topic} has no partition 7 (it has 0-1)",
        ),
        (("resume", group, "--partition", "-1"), "--partition must not be negative"),
        (("skip", "no-such-group", "--topic", topic, "--partition", "0"), "does not exist"),
        (("skip", group, "--topic", topic, "--partition", "2"), "has no partition 2"),
        (("skip", group, "--topic", topic, "--partition", "0"), "is not stopped on a record"),
        (
            ("skip", group, "--topic", topic, "--partition", "0", "--to-offset", "0"),
            "a skip only moves forward",
        ),
        (
            ("skip", group, "--topic", topic, "--partition", "0", "--to-offset", "1000"),
            "past the log end",
        ),
    ]
    for args, says in refused:
        code, out, err = await run(cluster, *args, "--execute" if args[0] == "skip" else "--json")
        assert (code, out) == (1, ""), (args, err)
        assert says in one_line(err), (args, err)
    for args in (("pause", group, "--partition", "x"), ("skip", group, "--partition", "0")):
        code, _out, err = await run(cluster, *args)
        assert code == 2, (args, err)
        assert "(see --help)" in one_line(err)

    await idle.close()  # nobody owns its partitions now
    code, _out, err = await run(
        cluster, "skip", group, "--topic", topic, "--partition", "0", "--to-offset", "25"
    )
    assert code == 1
    assert f"nobody owns {topic}/0" in one_line(err)
    store = ControlStore(zk, group)
    assert (await store.read(), await store.history()) == (Controls(), [])


async def test_a_skip_is_planned_then_requested_and_a_second_operators_skip_is_refused(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, produce: Produce, group_name: str
) -> None:
    """The owner is a member of an older version, which applies no skips (its claim node is all
    it writes): the skip stays pending, and a second operator's skip of the partition meets
    it."""
    topic = await make_topic(partitions=1)
    await produce(topic, 30)
    layout = GroupLayout(group_name, topic)
    await zk.ensure_path(layout.offsets)
    await zk.create(layout.offset(0), b"10")
    await zk.ensure_path(layout.owners)
    await zk.create(layout.owner(0), b"old-member", ephemeral=True)
    store = ControlStore(zk, group_name)
    args = ("skip", group_name, "--topic", topic, "--partition", "0", "--to-offset", "14")

    code, out, err = await run(cluster, *args, "--json")
    assert code == 0, err
    plan = {
        "topic": topic,
        "partition": 0,
        "owner": "old-member",
        "committed": 10,
        "end": 30,
        "stopped": None,
        "from": 10,
        "to": 14,
        "skipped": 4,
    }
    assert json.loads(out) == {**plan, "requested": False}
    code, out, err = await run(cluster, *args)
    assert code == 0, err
    assert "offsets 10 to 13 (4 records) are never handled" in out
    assert "dry run: nothing changed" in out
    assert await store.read() == Controls()

    code, out, err = await run(cluster, *args, "--execute", "--json")
    assert code == 0, err
    assert json.loads(out) == {**plan, "requested": True}
    skip = (await store.read()).skips[(topic, 0)]
    assert (skip.target, skip.stopped_on) == (14, None)
    assert skip.by.endswith(BY_HOST)
    code, out, err = await run(cluster, "describe", group_name, "--json")
    assert code == 0, err
    assert json.loads(out)[0]["skip"] == {
        "to": 14,
        "stopped_on": None,
        "by": skip.by,
        "at": format_at(skip.at),
    }

    code, out, err = await run(cluster, *args[:-1], "20", "--execute")
    assert (code, out) == (1, "")
    assert f"a skip of {topic}/0 to offset 14 is pending already" in one_line(err)
    assert (await store.read()).skips == {(topic, 0): skip}
    assert await stored_offsets(zk, layout, 1) == {0: 10}


async def test_describe_shows_the_host_a_named_member_registered(
    cluster: LocalCluster, make_topic: MakeTopic, group_name: str
) -> None:
    """A named member's id is its name, which holds no host: the host is the one it
    registered (the members table showed '-')."""
    topic = await make_topic(partitions=1)
    async with member(cluster, group_name, topic, member_name="svc-1") as named:
        code, out, err = await run(cluster, "describe", group_name, "--members", "--json")
        assert code == 0, err
        assert [(m["member"], m["host"]) for m in json.loads(out)] == [
            (named.id, socket.gethostname())
        ]
        code, out, err = await run(cluster, "describe", group_name, "--members")
        assert code == 0, err
        (line,) = [line for line in out.splitlines() if line.startswith(named.id)]
        assert line.split()[2] == socket.gethostname()
