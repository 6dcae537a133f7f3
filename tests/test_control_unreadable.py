"""A control node that cannot be read (a stranger's write, a truncated node) against the real
servers: it blinds no reader. The store leaves it out, warning once; a member goes on obeying
the other pauses; ``describe`` and ``check`` work and name the node; ``resume`` lifts it."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time

import httpx
import pytest
from aiokafka import AIOKafkaProducer
from kazoo.client import KazooClient
from kazoo.security import make_digest_acl

from aio_cluster.control.model import Stopped
from aio_cluster.control.store import UNREADABLE_BY, ControlStore
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from conftest import MakeTopic, Produce
from dashboard_support import dashboard_of
from support import member, wait_until
from test_cli import run
from test_control_member import Seen, consuming, load

pytestmark = pytest.mark.asyncio

GARBAGE = b"\x00not json{"


async def test_the_store_leaves_an_unreadable_node_out_and_warns_once(
    zk: ZooKeeper, group_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = ControlStore(zk, group_name)
    await store.pause([("t", 0)], "ann@host")
    await store.publish_stopped(Stopped("t", 3, "m-1", 7, "boom", 1.0))
    layout = GroupLayout(group_name, "t")
    bad = [layout.paused_node(1), layout.skip_node(2), layout.stopped_node(4)]
    for path in bad:
        await zk.create(path, GARBAGE, makepath=True)

    with caplog.at_level(logging.WARNING, logger="aio_cluster.control.store"):
        controls = await store.read()
        again = await store.read()
    assert list(controls.paused) == [("t", 0)]
    assert list(controls.stopped) == [("t", 3)]
    assert controls.skips == {}
    assert sorted(controls.unreadable) == sorted(bad)
    assert "not JSON" in controls.unreadable[layout.paused_node(1)]
    assert again == controls
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 3, "one warning per node, not one per read"
    assert all(any(path in message for message in warned) for path in bad)

    # The resume lifts an unreadable pause too (members hold a partition while it exists).
    lifted = await store.resume([("t", 1)], "bob@host")
    assert [(p.partition, p.by) for p in lifted] == [(1, UNREADABLE_BY)]
    assert await zk.exists(layout.paused_node(1)) is None
    assert "its node was unreadable" in (await store.history(limit=1))[0].detail


async def test_an_unreadable_node_blinds_neither_a_member_nor_describe_nor_check(
    cluster: LocalCluster,
    zk: ZooKeeper,
    producer: AIOKafkaProducer,
    make_topic: MakeTopic,
    group_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = await make_topic(3)
    layout = GroupLayout(group_name, topic)
    store = ControlStore(zk, group_name)
    seen = Seen()
    group = member(cluster, group_name, topic)
    caplog.set_level(logging.ERROR, logger="aio_cluster.member.controls")
    async with load(producer, topic), consuming(group, seen, "async for"):
        await wait_until(lambda: seen.of(0, since=0) > 0, what="partition 0 flowing")
        await store.pause([(topic, 0)], "test@host")
        await zk.create(layout.paused_node(1), GARBAGE)  # a stranger's pause of partition 1
        await zk.create(layout.skip_node(2), GARBAGE, makepath=True)  # and a skip of 2

        quiet_from = time.monotonic() + 2.0
        await asyncio.sleep(4.0)
        assert seen.of(0, since=quiet_from) == 0, "the good pause still holds"
        assert seen.of(1, since=quiet_from) == 0, "so does the node a stranger wrote"
        assert seen.of(2, since=quiet_from) > 0, "the other partition flows"
        assert sorted((await group.statistics()).operator_paused) == [0, 1]

        code, out, err = await run(cluster, "describe", group_name)
        assert code == 0, err
        (row,) = [line for line in out.splitlines() if line.split()[:2] == [topic, "0"]]
        assert "paused by test@host" in row
        text = " ".join(out.split())
        for path in (layout.paused_node(1), layout.skip_node(2)):
            assert f"control node {path} is unreadable" in text
        assert "members hold the partition while this node exists" in text

        code, out, err = await run(cluster, "describe", group_name, "--json")
        assert code == 0, err
        assert json.loads(out)[0]["paused"]["by"] == "test@host"
        assert f"control node {layout.paused_node(1)} is unreadable" in err

        window = ("--window", "1s", "--samples", "2")
        code, out, err = await run(cluster, "check", group_name, *window)
        assert code in (1, 2), err  # a verdict: 1 is a warning, 2 an error, never a crash
        assert f"control node {layout.skip_node(2)} is unreadable" in " ".join(out.split())
        assert out.splitlines()[-1].startswith(("warning:", "error:")), out

        # resume lifts the stranger's node: partition 1 flows again.
        code, out, err = await run(
            cluster, "resume", group_name, "--topic", topic, "--partition", "1"
        )
        assert code == 0, err
        resumed_at = time.monotonic()
        await wait_until(lambda: seen.of(1, since=resumed_at) > 0, what="partition 1 flowing again")
        assert seen.of(0, since=quiet_from) == 0
    skip_errors = [r for r in caplog.records if layout.skip_node(2) in r.getMessage()]
    assert len(skip_errors) == 1, "the member logs the unreadable skip once, not at every look"


async def test_the_dashboard_shows_the_other_controls_and_names_the_node(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = await make_topic(partitions=2)
    await produce(topic, 10)
    layout = GroupLayout(group_name, topic)
    await zk.ensure_path(layout.offsets)
    for partition in (0, 1):
        await zk.create(layout.offset(partition), b"0")
    await ControlStore(zk, group_name).pause([(topic, 0)], "ann@host")
    await zk.create(layout.paused_node(1), GARBAGE)
    caplog.set_level(logging.WARNING, logger="aio_cluster.control.store")
    dashboard = dashboard_of(cluster, group_name)
    async with (
        dashboard,
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=dashboard.app), base_url="http://dashboard"
        ) as client,
    ):
        for _look in range(3):
            await asyncio.wait_for(dashboard.watcher.next_refresh(), 30)
        page = (await client.get(f"/groups/{group_name}")).text
    (row,) = re.findall(rf'<tr data-partition="{topic}/0">.*?</tr>', page)
    assert 'class="badge paused"' in row
    assert "by ann@host" in row
    assert f"control node {layout.paused_node(1)} is unreadable" in page
    warned = [r for r in caplog.records if layout.paused_node(1) in r.getMessage()]
    assert len(warned) == 1, "one warning for the node, not one per look"


STRAY_NAMES = ["²", "\u0661", "01", "-1", " 1", "2147483648", "9" * 20, "p1"]
"""Control node names no writer of ours makes: ``"²"`` passes `str.isdigit()` and `int()`
refuses it; ``"\u0661"`` (ARABIC-INDIC DIGIT ONE) and ``"01"`` read as 1 by `int()`;
``"2147483648"`` is past Kafka's last partition id (a member's key of it would name another
topic's partition 0)."""


async def test_a_node_named_as_no_partition_fails_no_member_nor_describe_nor_the_dashboard(
    cluster: LocalCluster,
    zk: ZooKeeper,
    producer: AIOKafkaProducer,
    make_topic: MakeTopic,
    group_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = await make_topic(2)
    layout = GroupLayout(group_name, topic)
    seen = Seen()
    group = member(cluster, group_name, topic)
    caplog.set_level(logging.WARNING, logger="aio_cluster.member.controls")
    strays = [
        f"{parent}/{name}" for parent in (layout.paused, layout.skips) for name in STRAY_NAMES
    ]
    strays.append(f"{layout.paused.rsplit('/', 1)[0]}/no topic!")
    # A skip whose time is none (JSON's 1e999 reads as infinity, which no clock shows).
    bad_time = layout.skip_node(1)
    async with load(producer, topic), consuming(group, seen, "async for"):
        await wait_until(lambda: seen.of(0, since=0) > 0 and seen.of(1, since=0) > 0)
        for path in strays:
            await zk.create(path, GARBAGE, makepath=True)
        await zk.create(bad_time, b'{"to":5,"stopped_on":null,"by":"x","at":1e999}')

        def warned() -> bool:
            messages = " ".join(
                r.getMessage() for r in caplog.records if r.name == "aio_cluster.member.controls"
            )
            return all(path in messages for path in strays if "no topic!" not in path)

        await wait_until(warned, what="the member naming every stray node")
        since = time.monotonic()
        await wait_until(
            lambda: seen.of(0, since=since) > 0 and seen.of(1, since=since) > 0,
            what="both partitions read on",
        )
        statistics = await group.statistics()
        assert list(statistics.operator_paused) == []
        assert statistics.skips_applied == 0, "the skip with no time is left as it is"

        code, out, err = await run(cluster, "describe", group_name)
        assert code == 0, err
        text = " ".join(out.split())
        for path in [*strays, bad_time]:
            assert f"control node {path} is unreadable" in text, path
        assert "no partition is named so: members ignore it" in text
        assert "not a time" in text

        dashboard = dashboard_of(cluster, group_name)
        async with (
            dashboard,
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=dashboard.app), base_url="http://dashboard"
            ) as client,
        ):
            await dashboard.watcher.next_refresh()
            page = (await client.get(f"/groups/{group_name}")).text
        assert f"control node {layout.paused}/\u0661 is unreadable" in page
    members = [r.getMessage() for r in caplog.records if r.name == "aio_cluster.member.controls"]
    assert len([m for m in members if f"{layout.paused}/²" in m]) == 1, "named once, not per look"


async def test_a_control_node_a_stranger_locked_fails_no_member(
    cluster: LocalCluster,
    producer: AIOKafkaProducer,
    make_topic: MakeTopic,
    group_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A stranger's node under the controls whose ACL lets the member read nothing: the member
    reads on (it does not wait for good on controls it cannot read) and says why, once."""
    topic = await make_topic(2)
    layout = GroupLayout(group_name, topic)
    stranger = KazooClient(hosts=cluster.zookeeper)
    await asyncio.to_thread(stranger.start)
    try:
        await asyncio.to_thread(stranger.ensure_path, layout.paused.rsplit("/", 1)[0])
        locked = [make_digest_acl("stranger", "secret", all=True)]
        await asyncio.to_thread(stranger.create, layout.paused, b"", locked)
    finally:
        await asyncio.to_thread(stranger.stop)
        stranger.close()  # its socket pair too
    caplog.set_level(logging.WARNING, logger="aio_cluster.member.controls")
    seen = Seen()
    async with (
        load(producer, topic),
        consuming(member(cluster, group_name, topic), seen, "async for"),
    ):
        await wait_until(
            lambda: seen.of(0, since=0) > 0 and seen.of(1, since=0) > 0, what="both partitions read"
        )
        code, out, err = await run(cluster, "describe", group_name)
        assert code == 0, err
        assert f"control node {layout.paused} is unreadable" in " ".join(out.split())
    failures = [
        r for r in caplog.records if "reading the group's controls failed" in r.getMessage()
    ]
    assert len(failures) == 1, "said once"
    assert layout.paused in failures[0].getMessage()
