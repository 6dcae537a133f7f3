"""The ``aio-cluster`` command against the real servers, run as users run it: a process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaConsumer, TopicPartition

from aio_cluster import ConsumerGroup
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from conftest import MakeTopic, Produce
from launcher import Launched, launcher
from support import closable, running, stored_offsets

pytestmark = pytest.mark.asyncio

REPO = Path(__file__).resolve().parent.parent


async def run(
    cluster: LocalCluster | None, *args: str, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """Run ``python -m aio_cluster ARGS`` to its end: ``(status, stdout, stderr)``."""
    async with start(cluster, *args, env=env) as process:
        out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@contextlib.asynccontextmanager
async def start(
    cluster: LocalCluster | None, *args: str, env: dict[str, str] | None = None
) -> AsyncIterator[Launched]:
    """``python -m aio_cluster ARGS`` running for the block, its output piped; killed after it
    unless it ended. Only ``cluster`` (and ``env``) name servers: no ``AIO_CLUSTER_*`` of ours.
    It runs as a fork of this process's launcher (tests/launcher.py), which imported the command
    once; ``test_the_module_runs_as_a_program`` runs the interpreter itself."""
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith("AIO_CLUSTER_")
    }
    if cluster is not None:
        environment["AIO_CLUSTER_BOOTSTRAP"] = cluster.bootstrap
        environment["AIO_CLUSTER_ZOOKEEPER"] = cluster.zookeeper
    environment.update(env or {})
    process = await launcher().run(list(args), environment, cwd=REPO)
    try:
        yield process
    finally:
        process.kill()
        await process.wait()


def one_line(err: str) -> str:
    """The error output must be exactly one line, and no traceback."""
    assert err.count("\n") == 1, err
    assert err.endswith("\n"), err
    assert "Traceback" not in err
    return err


async def end_offsets(cluster: LocalCluster, topic: str, partitions: int) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, partition) for partition in range(partitions)]
        return {tp.partition: end for tp, end in (await consumer.end_offsets(tps)).items()}
    finally:
        await consumer.stop()


@pytest_asyncio.fixture
async def partly_consumed(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, group_name: str
) -> AsyncIterator[tuple[ConsumerGroup, Counter[int], Counter[int]]]:
    """A joined member that read and committed the first 20 messages of a 2-partition topic,
    then 10 more were produced: ``(member, committed per partition, unread per partition)``."""
    topic = await make_topic(partitions=2)
    first = await produce(topic, 20)
    async with ConsumerGroup(group_name, cluster.bootstrap, cluster.zookeeper, topic) as group:
        seen = 0
        async with contextlib.aclosing(closable(group.batches(commit=False))) as batches:
            async for partition, batch in batches:
                await group.commit(partition, batch[-1].offset + 1)
                seen += len(batch)
                if seen == 20:
                    break
        unread = await produce(topic, 10, start=20)
        yield group, first, unread


async def test_describe_json_lag_is_log_end_minus_committed(
    cluster: LocalCluster,
    zk: ZooKeeper,
    partly_consumed: tuple[ConsumerGroup, Counter[int], Counter[int]],
) -> None:
    group, committed, unread = partly_consumed
    code, out, err = await run(cluster, "describe", group.name, "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert [set(row) for row in rows] == [
        {
            "topic",
            "partition",
            "owner",
            "committed",
            "end",
            "lag",
            "paused",
            "stopped",
            "skip",
            "stuck",
            "unreadable",
        }
    ] * 2
    ends = await end_offsets(cluster, group.topic, 2)
    stored = await stored_offsets(zk, GroupLayout(group.name, group.topic), 2)
    for row in rows:
        partition = row["partition"]
        assert row["topic"] == group.topic
        assert row["owner"] == group.id
        assert row["committed"] == stored[partition] == committed[partition]
        assert row["end"] == ends[partition]
        assert row["lag"] == row["end"] - row["committed"] == unread[partition]


async def test_describe_table_and_list(
    cluster: LocalCluster, partly_consumed: tuple[ConsumerGroup, Counter[int], Counter[int]]
) -> None:
    group, _committed, unread = partly_consumed
    code, out, err = await run(cluster, "describe", group.name, "--topic", group.topic)
    assert code == 0, err
    assert group.id in out
    assert group.strategy.value in out  # the member's strategy
    for partition in (0, 1):
        assert any(
            line.split()[:2] == [group.topic, str(partition)]
            and line.split()[-1] == str(unread[partition])
            for line in out.splitlines()
        ), out
    code, out, err = await run(cluster, "list", "--json")
    assert code == 0, err
    assert {"group": group.name, "topics": [group.topic], "members": 1} in json.loads(out)


async def test_reset_offsets_plan_refusal_execution(
    cluster: LocalCluster,
    zk: ZooKeeper,
    partly_consumed: tuple[ConsumerGroup, Counter[int], Counter[int]],
) -> None:
    group, committed, _unread = partly_consumed
    layout = GroupLayout(group.name, group.topic)
    before = await stored_offsets(zk, layout, 2)
    args = ("reset-offsets", group.name, "--topic", group.topic)

    code, out, err = await run(cluster, *args, "--to-earliest")
    assert code == 0, err
    assert "dry run" in out
    assert "1 member(s) registered" in out
    plan = {
        fields[1]: [fields[0], *fields[2:]]
        for fields in (line.split() for line in out.splitlines()[1:3])
    }
    assert plan == {str(p): [group.topic, str(committed[p]), "0"] for p in (0, 1)}
    assert await stored_offsets(zk, layout, 2) == before

    code, _out, err = await run(cluster, *args, "--to-earliest", "--execute")
    assert code == 1
    assert "refused" in one_line(err)
    assert group.id in err
    assert await stored_offsets(zk, layout, 2) == before

    await group.close()
    code, _out, err = await run(
        cluster, *args, "--shift-by", "-3", "--partitions", "1", "--execute"
    )
    assert code == 0, err
    assert await stored_offsets(zk, layout, 2) == {0: before[0], 1: before[1] - 3}

    code, _out, err = await run(
        cluster, *args, "--to-datetime", "2000-01-01T00:00:00Z", "--execute"
    )
    assert code == 0, err
    assert await stored_offsets(zk, layout, 2) == {0: 0, 1: 0}

    ends = await end_offsets(cluster, group.topic, 2)
    code, _out, err = await run(cluster, *args, "--to-latest", "--execute")
    assert code == 0, err
    assert await stored_offsets(zk, layout, 2) == ends


async def test_reset_repairs_a_corrupted_offset_node(
    cluster: LocalCluster,
    zk: ZooKeeper,
    partly_consumed: tuple[ConsumerGroup, Counter[int], Counter[int]],
) -> None:
    group, committed, _unread = partly_consumed
    await group.close()
    layout = GroupLayout(group.name, group.topic)
    await zk.set(layout.offset(0), b"garbage")

    code, out, err = await run(cluster, "describe", group.name, "--json")
    assert code == 0, err
    assert json.loads(out)[0]["committed"] is None
    code, out, err = await run(cluster, "describe", group.name)
    assert code == 0, err
    assert "garbage" in out

    args = ("reset-offsets", group.name, "--topic", group.topic, "--partitions", "0")
    code, _out, err = await run(cluster, *args, "--shift-by", "1", "--execute")
    assert code == 1
    assert "cannot be shifted" in one_line(err)
    code, _out, err = await run(cluster, *args, "--to-offset", "4", "--execute")
    assert code == 0, err
    assert await stored_offsets(zk, layout, 2) == {0: 4, 1: committed[1]}


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["describe", "no-such-group"], 1, "group 'no-such-group' does not exist"),
        (["describe", "GROUP", "--topic", "no-such-topic"], 1, "'no-such-topic' does not exist"),
        (["describe", "bad/name"], 1, "group name 'bad/name' is not valid"),
        (["reset-offsets", "GROUP", "--topic", "TOPIC", "--to-offset", "x"], 2, "invalid int"),
        (["reset-offsets", "GROUP", "--topic", "TOPIC"], 2, "one of the arguments"),
        (
            ["reset-offsets", "GROUP", "--topic", "TOPIC", "--to-latest", "--partitions", "9"],
            1,
            "[9] do not exist",
        ),
        (["reset-offsets", "GROUP", "--topic", "TOPIC", "--to-datetime", "soon"], 1, "ISO 8601"),
        (["consume", "GROUP", "no-such-topic"], 1, "'no-such-topic' does not exist"),
        (["describe", "GROUP", "--bootstrap", "127.0.0.1:CLOSED"], 1, "could not reach Kafka"),
        (["list", "--zookeeper", "127.0.0.1:CLOSED", "--timeout", "1"], 1, "no ZooKeeper server"),
        (["describe", "GROUP", "--bootstrap", "nonsense"], 1, "'nonsense'"),
        (["frobnicate"], 2, "invalid choice"),
    ],
)
async def test_bad_input_is_one_line_and_a_non_zero_status(
    cluster: LocalCluster,
    partly_consumed: tuple[ConsumerGroup, Counter[int], Counter[int]],
    args: list[str],
    code: int,
    message: str,
) -> None:
    group, _committed, _unread = partly_consumed
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = str(sock.getsockname()[1])  # bound, never listening: connections are refused
        replaced = [
            arg.replace("GROUP", group.name).replace("TOPIC", group.topic).replace("CLOSED", closed)
            for arg in args
        ]
        status, out, err = await run(cluster, *replaced)
    assert status == code, (out, err)
    assert message in one_line(err)
    assert out == ""


async def test_no_servers_named_is_an_error() -> None:
    code, _out, err = await run(None, "list")
    assert code == 1
    assert "pass --zookeeper or set AIO_CLUSTER_ZOOKEEPER" in one_line(err)


@pytest.mark.parametrize(
    "args",
    [["--help"], ["list", "--timeout", "nope"], ["list"], ["describe", "--json", "no-such-group"]],
    ids=["help", "bad-option", "no-servers", "one-group"],
)
async def test_the_module_runs_as_a_program(cluster: LocalCluster, args: list[str]) -> None:
    """The runs of the other tests fork the launcher; the interpreter itself says the same."""
    named = None if args == ["list"] else cluster
    launched = await run(named, *args)
    environment = {key: value for key, value in os.environ.items() if not key.startswith("AIO_")}
    if named is not None:
        environment["AIO_CLUSTER_BOOTSTRAP"] = cluster.bootstrap
        environment["AIO_CLUSTER_ZOOKEEPER"] = cluster.zookeeper
    async with running(
        *(sys.executable, "-m", "aio_cluster", *args),
        cwd=REPO,
        env=environment,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    ) as process:
        out, err = await asyncio.wait_for(process.communicate(), 120)
    assert (process.returncode, out.decode(), err.decode()) == launched


@pytest.mark.parametrize(
    "command", [[], ["list"], ["describe"], ["check"], ["reset-offsets"], ["consume"], ["local"]]
)
async def test_help_everywhere(command: list[str]) -> None:
    code, out, err = await run(None, *command, "--help")
    assert code == 0, err
    assert out.startswith(f"usage: aio-cluster {' '.join(command)}".rstrip())


async def test_consume_prints_every_record_and_ctrl_c_commits_and_leaves(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
) -> None:
    topic = await make_topic(partitions=2)
    counts = await produce(topic, 25)
    async with start(cluster, "consume", group_name, topic, "--from-beginning") as process:
        assert process.stdout is not None
        lines = [await asyncio.wait_for(process.stdout.readline(), 60) for _ in range(25)]
        process.send_signal(signal.SIGINT)
        rest, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    assert rest == b""
    records = [line.decode().rstrip("\n").split("\t") for line in lines]
    assert sorted(value for _p, _o, _k, value in records) == sorted(str(i) for i in range(25))
    assert all(key == f"k{value}" for _p, _o, key, value in records)
    layout = GroupLayout(group_name, topic)
    assert await stored_offsets(zk, layout, 2) == dict(counts)
    assert await zk.get_children(layout.ids) == []


async def test_list_table_and_reset_offsets_json(
    cluster: LocalCluster,
    zk: ZooKeeper,
    partly_consumed: tuple[ConsumerGroup, Counter[int], Counter[int]],
) -> None:
    group, committed, _unread = partly_consumed
    code, out, err = await run(cluster, "list")
    assert code == 0, err
    assert any(line.split() == [group.name, group.topic, "1"] for line in out.splitlines()), out

    await group.close()
    layout = GroupLayout(group.name, group.topic)
    args = ("reset-offsets", group.name, "--topic", group.topic, "--to-earliest", "--json")
    code, out, err = await run(cluster, *args)
    assert code == 0, err
    expected = [
        {
            "topic": group.topic,
            "partition": p,
            "old": committed[p],
            "unreadable": None,
            "new": 0,
            "stored": False,
        }
        for p in (0, 1)
    ]
    assert json.loads(out) == expected
    assert await stored_offsets(zk, layout, 2) == dict(committed)
    code, out, err = await run(cluster, *args, "--execute")
    assert code == 0, err
    assert json.loads(out) == [{**row, "stored": True} for row in expected]
    assert await stored_offsets(zk, layout, 2) == {0: 0, 1: 0}


async def test_describe_watch_redraws_in_place_until_ctrl_c(
    cluster: LocalCluster, partly_consumed: tuple[ConsumerGroup, Counter[int], Counter[int]]
) -> None:
    group, _committed, _unread = partly_consumed
    # rich draws its live display where it believes it writes to a terminal.
    async with start(
        cluster,
        *("describe", group.name, "--watch", "--interval", "200ms"),
        env={"TTY_COMPATIBLE": "1", "COLUMNS": "200"},
    ) as process:
        assert process.stdout is not None
        shown = b""
        # Drawn, then redrawn in place: the cursor moves up over the previous drawing.
        while not (group.id.encode() in shown and b"\x1b[" in shown and b"\x1b[2K" in shown):
            chunk = await asyncio.wait_for(process.stdout.read(4096), 60)
            assert chunk, shown.decode(errors="replace")
            shown += chunk
        process.send_signal(signal.SIGINT)
        rest, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    assert err == b""
    assert group.topic.encode() in shown + rest


async def test_consume_takes_the_group_strategy_or_the_one_given(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, group_name: str
) -> None:
    topic = await make_topic(partitions=2)
    await produce(topic, 10)
    async with ConsumerGroup(
        group_name, cluster.bootstrap, cluster.zookeeper, topic, strategy="range"
    ):
        code, _out, err = await run(cluster, "consume", group_name, topic, "--strategy", "sticky")
        assert code == 1
        assert "strateg" in one_line(err)
        # Without --strategy the command joins with the group's own: range.
        async with start(cluster, "consume", group_name, topic, "--from-beginning") as process:
            assert process.stdout is not None
            line = await asyncio.wait_for(process.stdout.readline(), 60)
            assert len(line.split(b"\t")) == 4, line
            process.send_signal(signal.SIGINT)
            _rest, err_bytes = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == 0, err_bytes.decode()


async def test_local_up_and_down(own_cache: Path) -> None:
    """``aio-cluster local`` is ``python -m aio_cluster.local``."""
    cache = own_cache
    env = {"AIO_CLUSTER_CACHE": str(cache)}
    async with start(None, "local", "up", env=env) as up:
        assert up.stdout is not None
        exports = [await asyncio.wait_for(up.stdout.readline(), 300) for _ in range(2)]
        assert exports[0].startswith(b"export AIO_CLUSTER_BOOTSTRAP=127.0.0.1:")
        assert exports[1].startswith(b"export AIO_CLUSTER_ZOOKEEPER=127.0.0.1:")
        code, _out, err = await run(None, "local", "down", env=env)
        assert code == 0, err
        assert await asyncio.wait_for(up.wait(), 60) == 0
    code, _out, err = await run(None, "local", "down", env=env)
    assert code == 1
    assert "nothing running" in err
