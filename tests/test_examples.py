"""The examples, run as users run them: the apps served by real uvicorn / aiohttp processes and
asked over HTTP, the scripts as processes; each against the session's cluster, ended by a
signal, with the offsets it stored and the registration it removed checked in ZooKeeper."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from conftest import MakeTopic, Produce
from support import running, stored_offsets, wait_until

pytestmark = pytest.mark.asyncio

EXAMPLES = Path(__file__).parents[1] / "examples"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def environment(cluster: LocalCluster, group: str, topic: str) -> dict[str, str]:
    return {
        **os.environ,
        "AIO_CLUSTER_BOOTSTRAP": cluster.bootstrap,
        "AIO_CLUSTER_ZOOKEEPER": cluster.zookeeper,
        "AIO_CLUSTER_GROUP": group,
        "AIO_CLUSTER_TOPIC": topic,
        "PYTHONUNBUFFERED": "1",
    }


@contextlib.asynccontextmanager
async def start(
    command: list[str], env: dict[str, str], log: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``command`` running for the block, its output in ``log``; killed after it unless it ended."""
    with log.open("wb") as output:
        async with running(
            *command, env=env, stdout=output, stderr=asyncio.subprocess.STDOUT
        ) as process:
            yield process


def output(log: Path) -> str:
    return log.read_text(errors="replace")


async def end(process: asyncio.subprocess.Process, log: Path) -> None:
    """SIGTERM, and the process must exit on its own: with 0, or (uvicorn re-raises the signal
    once its graceful shutdown is complete) by that SIGTERM."""
    process.send_signal(signal.SIGTERM)
    try:
        code = await asyncio.wait_for(process.wait(), 60)
    except asyncio.TimeoutError:
        raise AssertionError(f"did not end on SIGTERM:\n{output(log)}") from None
    assert code in (0, -signal.SIGTERM), output(log)


async def assert_left(zk: ZooKeeper, layout: GroupLayout, counts: Counter[int]) -> None:
    """Every produced record's offset is stored; no registration and no claim remain."""
    assert await stored_offsets(zk, layout, 3) == dict(counts)
    assert await zk.get_children(layout.ids) == []
    for partition in range(3):
        assert await zk.exists(layout.owner(partition)) is None


def app_command(app: str, port: int) -> list[str]:
    if app == "fastapi":
        return [
            *(sys.executable, "-m", "uvicorn", "fastapi_app:app", "--app-dir", str(EXAMPLES)),
            *("--host", "127.0.0.1", "--port", str(port)),
        ]
    return [sys.executable, str(EXAMPLES / "aiohttp_app.py"), "--port", str(port)]


@pytest.mark.parametrize("app", ["fastapi", "aiohttp"])
async def test_app_reports_health_over_http_and_leaves_on_sigterm(
    app: str,
    cluster: LocalCluster,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
    zk: ZooKeeper,
    tmp_path: Path,
) -> None:
    topic = await make_topic(partitions=3)
    counts = await produce(topic, 200)
    port = free_port()
    log = tmp_path / f"{app}.log"
    reports: list[dict[str, Any]] = []
    command = app_command(app, port)
    async with (
        start(command, environment(cluster, group_name, topic), log) as process,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client,
    ):

        async def caught_up(total: int) -> bool:
            """Consumed ``total`` and, by the member's statistics, no lag left."""
            try:
                response = await client.get("/health")
            except httpx.TransportError:
                return False  # not listening yet
            if response.status_code != 200:
                return False
            reports.append(response.json())
            return bool(reports[-1]["consumed"] == total and reports[-1]["lag"] == 0)

        await wait_until(lambda: caught_up(200), timeout=60, what=f"{app} to consume 200")
        counts += await produce(topic, 100, start=200)  # more, while it serves
        await wait_until(lambda: caught_up(300), what=f"{app} to consume 300")
        report = reports[-1]
        assert report["claimed"] == [0, 1, 2]
        assert report["state"] == "joined"
        assert {int(p): v["consumed"] for p, v in report["partitions"].items()} == counts
        assert {int(p): v["end"] for p, v in report["partitions"].items()} == counts
        assert {int(p): v["stored_offset"] for p, v in report["partitions"].items()} == counts
        await end(process, log)
    layout = GroupLayout(group_name, topic)
    assert report["member"] not in await zk.get_children(layout.ids)
    await assert_left(zk, layout, counts)


async def test_consumer_group_script_shares_the_topic_between_two_members(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
    zk: ZooKeeper,
    tmp_path: Path,
) -> None:
    topic = await make_topic(partitions=3)
    counts = await produce(topic, 300)
    log = tmp_path / "consumer_group.log"
    command = [sys.executable, str(EXAMPLES / "consumer_group.py"), group_name, topic]
    fetched: Counter[str] = Counter()

    def all_fetched() -> bool:
        fetched.clear()
        for line in log.read_text().splitlines():
            if line.startswith("Consumer #"):
                words = line.split()  # Consumer #1 fetched 17 from 2
                fetched[words[1]] += int(words[3])
        return sum(fetched.values()) == 300

    async with start(command, environment(cluster, group_name, topic), log) as process:
        await wait_until(all_fetched, timeout=60, what="300 records fetched")
        assert set(fetched) == {"#1", "#2"}, output(log)
        await end(process, log)
    await assert_left(zk, GroupLayout(group_name, topic), counts)


async def test_manual_commit_script_commits_what_it_wrote(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
    zk: ZooKeeper,
    tmp_path: Path,
) -> None:
    topic = await make_topic(partitions=3)
    counts = await produce(topic, 250)
    out = tmp_path / "out.txt"
    log = tmp_path / "manual_commit.log"
    command = [
        *(sys.executable, str(EXAMPLES / "manual_commit.py"), group_name, topic, str(out)),
        *("--every", "100"),
    ]
    layout = GroupLayout(group_name, topic)

    # A chunk of 100 or more is committed while it runs; the rest when the signal comes.
    async def a_chunk() -> bool:
        return sum((await stored_offsets(zk, layout, 3)).values()) >= 100

    async with start(command, environment(cluster, group_name, topic), log) as process:
        await wait_until(a_chunk, timeout=60, what="a chunk committed")
        await end(process, log)
    written = [line.split() for line in out.read_text().splitlines()]
    assert sorted(value for _p, _o, value in written) == sorted(str(i) for i in range(250))
    await assert_left(zk, layout, counts)
