"""The examples, run as users run them: the apps served by real uvicorn / aiohttp processes and
asked over HTTP, the scripts as processes; each against the session's cluster, ended by a
signal, with the offsets it stored and the registration it removed checked in ZooKeeper."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import socket
import sys
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from conftest import MakeTopic, Produce
from pipeline import outputs_of
from support import running, stored_offsets, wait_until

pytestmark = pytest.mark.asyncio

EXAMPLES = Path(__file__).parents[1] / "examples"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclasses.dataclass
class Example:
    """One example's run: a fresh group on a fresh 3-partition topic of the session's cluster, and
    a folder for the example's output."""

    cluster: LocalCluster
    zk: ZooKeeper
    group: str
    topic: str
    folder: Path

    @property
    def layout(self) -> GroupLayout:
        return GroupLayout(self.group, self.topic)

    @contextlib.asynccontextmanager
    async def start(
        self, command: list[str], log: Path
    ) -> AsyncIterator[asyncio.subprocess.Process]:
        """``command`` running for the block with the group and topic in its environment, its
        output in ``log``; killed after the block unless it ended."""
        env = {
            **os.environ,
            "AIO_CLUSTER_BOOTSTRAP": self.cluster.bootstrap,
            "AIO_CLUSTER_ZOOKEEPER": self.cluster.zookeeper,
            "AIO_CLUSTER_GROUP": self.group,
            "AIO_CLUSTER_TOPIC": self.topic,
            "PYTHONUNBUFFERED": "1",
        }
        with log.open("wb") as output:
            async with running(
                *command, env=env, stdout=output, stderr=asyncio.subprocess.STDOUT
            ) as process:
                yield process

    async def run(
        self, command: list[str], log: Path, until: Callable[[], Awaitable[bool] | bool], what: str
    ) -> None:
        """Run ``command`` until ``until()`` holds, then SIGTERM it: it must end on its own."""
        async with self.start(command, log) as process:
            await wait_until(until, timeout=60, what=what)
            await end(process, log)

    async def assert_left(self, counts: Counter[int]) -> None:
        """Every produced record's offset is stored; no registration and no claim remain."""
        assert await stored_offsets(self.zk, self.layout, 3) == dict(counts)
        assert await self.zk.get_children(self.layout.ids) == []
        for partition in range(3):
            assert await self.zk.exists(self.layout.owner(partition)) is None


@pytest_asyncio.fixture
async def example(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, group_name: str, tmp_path: Path
) -> Example:
    return Example(cluster, zk, group_name, await make_topic(partitions=3), tmp_path)


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


def app_command(app: str, port: int) -> list[str]:
    if app == "fastapi":
        return [
            *(sys.executable, "-m", "uvicorn", "fastapi_app:app", "--app-dir", str(EXAMPLES)),
            *("--host", "127.0.0.1", "--port", str(port)),
        ]
    return [sys.executable, str(EXAMPLES / "aiohttp_app.py"), "--port", str(port)]


@pytest.mark.parametrize("app", ["fastapi", "aiohttp"])
async def test_app_reports_health_over_http_and_leaves_on_sigterm(
    app: str, example: Example, produce: Produce
) -> None:
    counts = await produce(example.topic, 200)
    port = free_port()
    log = example.folder / f"{app}.log"
    reports: list[dict[str, Any]] = []
    async with (
        example.start(app_command(app, port), log) as process,
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
        counts += await produce(example.topic, 100, start=200)  # more, while it serves
        await wait_until(lambda: caught_up(300), what=f"{app} to consume 300")
        report = reports[-1]
        assert report["claimed"] == [0, 1, 2]
        assert report["state"] == "joined"
        assert {int(p): v["consumed"] for p, v in report["partitions"].items()} == counts
        assert {int(p): v["end"] for p, v in report["partitions"].items()} == counts
        assert {int(p): v["stored_offset"] for p, v in report["partitions"].items()} == counts
        await end(process, log)
    assert report["member"] not in await example.zk.get_children(example.layout.ids)
    await example.assert_left(counts)


async def test_consumer_group_script_shares_the_topic_between_two_members(
    example: Example, produce: Produce
) -> None:
    counts = await produce(example.topic, 300)
    log = example.folder / "consumer_group.log"
    command = [sys.executable, str(EXAMPLES / "consumer_group.py"), example.group, example.topic]
    fetched: Counter[str] = Counter()

    def all_fetched() -> bool:
        fetched.clear()
        for line in log.read_text().splitlines():
            if line.startswith("Consumer #"):
                words = line.split()  # Consumer #1 fetched 17 from 2
                fetched[words[1]] += int(words[3])
        return sum(fetched.values()) == 300

    await example.run(command, log, all_fetched, "300 records fetched")
    assert set(fetched) == {"#1", "#2"}, output(log)
    await example.assert_left(counts)


async def test_manual_commit_script_commits_what_it_wrote(
    example: Example, produce: Produce
) -> None:
    counts = await produce(example.topic, 250)
    out = example.folder / "out.txt"
    log = example.folder / "manual_commit.log"
    command = [
        *(sys.executable, str(EXAMPLES / "manual_commit.py"), example.group, example.topic),
        *(str(out), "--every", "100"),
    ]

    # A chunk of 100 or more is committed while it runs; the rest when the signal comes.
    async def a_chunk() -> bool:
        return sum((await stored_offsets(example.zk, example.layout, 3)).values()) >= 100

    await example.run(command, log, a_chunk, "a chunk committed")
    written = [line.split() for line in out.read_text().splitlines()]
    assert sorted(value for _p, _o, value in written) == sorted(str(i) for i in range(250))
    await example.assert_left(counts)


async def test_exactly_once_script_writes_each_input_once(
    example: Example, produce: Produce, make_topic: MakeTopic
) -> None:
    counts = await produce(example.topic, 200)
    sink = await make_topic(partitions=3)
    log = example.folder / "exactly_once.log"
    command = [
        *(sys.executable, str(EXAMPLES / "exactly_once.py"), example.group, example.topic, sink)
    ]
    async with outputs_of(example.cluster.bootstrap, sink, 3) as outputs:

        async def all_written() -> bool:
            await outputs.read(100)
            return len(outputs.keys) == 200

        await example.run(command, log, all_written, "200 outputs, read_committed")
        await outputs.to_end()
    assert set(outputs.keys.values()) == {1}, output(log)
    assert await stored_offsets(example.zk, example.layout, 3) == dict(counts)
    await example.assert_left(counts)
