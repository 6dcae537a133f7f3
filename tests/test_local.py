"""The local cluster against its real servers: round trips, faults, the command line, failures."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import resource
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from kazoo.client import KazooClient, KazooState
from kazoo.retry import KazooRetry

from aio_cluster import ConfigurationError, LocalClusterError
from aio_cluster.local import LocalCluster, docker, jars
from aio_cluster.local import process as process_module
from aio_cluster.local.config import rack_properties

from support import create_topic, fresh, running, wait_until

BOOTSTRAP_VAR = "AIO_CLUSTER_BOOTSTRAP"
ZOOKEEPER_VAR = "AIO_CLUSTER_ZOOKEEPER"
REPO = Path(__file__).resolve().parent.parent


# --- helpers --------------------------------------------------------------------------------------


async def port_open(address: str) -> bool:
    """Whether something accepts connections at ``"host:port"``."""
    host, _, port = address.rpartition(":")
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), 2.0)
    except (OSError, asyncio.TimeoutError):
        return False
    writer.close()
    return True


async def closed(address: str) -> bool:
    return not await port_open(address)


def java_children() -> set[int]:
    """The pids of java processes (servers, tools, Maven) whose parent is this test process."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # ended meanwhile
            continue
        name, fields = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :]
        if name == "java" and int(fields.split()[1]) == os.getpid():
            found.add(int(stat.parent.name))
    return found


def text_of(path: Path) -> str:
    return path.read_text()


async def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value)
    finally:
        await producer.stop()


async def consume(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        return [(await asyncio.wait_for(consumer.getone(), 30)).value for _ in range(count)]
    finally:
        await consumer.stop()


async def kazoo(connect: str, **options: Any) -> Any:
    client = KazooClient(
        hosts=connect,
        connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=0.5),
        **options,
    )
    await asyncio.to_thread(client.start, 10)
    return client


async def kazoo_close(client: Any) -> None:
    await asyncio.to_thread(client.stop)
    await asyncio.to_thread(client.close)


_RESTART_SESSION = 30.0
"""The session timeout of the short-restart test, in seconds."""


# --- the servers ----------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_kafka_round_trip(cluster: LocalCluster) -> None:
    topic = await create_topic(cluster.bootstrap, prefix="local")
    await produce(cluster.bootstrap, topic, [b"one", b"two"])
    assert await consume(cluster.bootstrap, topic, 2) == [b"one", b"two"]


@pytest.mark.asyncio
async def test_addresses_are_ipv4_loopback(cluster: LocalCluster) -> None:
    for address in (cluster.bootstrap, cluster.zookeeper):
        assert address.startswith("127.0.0.1:") or cluster.mode == "environment"


@pytest.mark.asyncio
async def test_zookeeper_restart_keeps_data(restartable: LocalCluster) -> None:
    path = f"/test-local/{fresh('node')}"
    client = await kazoo(restartable.zookeeper)
    await asyncio.to_thread(client.create, path, b"kept", makepath=True)
    await kazoo_close(client)

    await restartable.stop_zookeeper()
    assert await closed(restartable.zookeeper)
    await restartable.start_zookeeper()

    client = await kazoo(restartable.zookeeper)
    try:
        data, _ = await asyncio.to_thread(client.get, path)
    finally:
        await kazoo_close(client)
    assert data == b"kept"


@pytest.mark.asyncio
async def test_short_zookeeper_restart_keeps_the_session(restartable: LocalCluster) -> None:
    # A session far longer than a restart, even on a loaded machine (the server grants up to 60 s).
    client = await kazoo(restartable.zookeeper, timeout=_RESTART_SESSION)
    states: list[str] = []
    client.add_listener(states.append)  # called on a kazoo thread; list.append is atomic
    try:
        path = await asyncio.to_thread(
            client.create, f"/test-local/{fresh('ephemeral')}", ephemeral=True, makepath=True
        )
        session_id = client.client_id[0]
        async with restartable.zookeeper_down():
            assert await closed(restartable.zookeeper), "the server is down"
            await wait_until(lambda: KazooState.SUSPENDED in states, what="it is noticed")

        # The outcome says whether the restart was the short one meant: the same session,
        # never lost, and its ephemeral node still there.
        await wait_until(lambda: bool(client.connected), what="the client reconnected")
        assert client.client_id[0] == session_id
        assert KazooState.LOST not in states
        assert await asyncio.to_thread(client.exists, path) is not None
    finally:
        await kazoo_close(client)


@pytest.mark.asyncio
async def test_kafka_restart_keeps_data(restartable: LocalCluster) -> None:
    topic = await create_topic(restartable.bootstrap, prefix="local")
    await produce(restartable.bootstrap, topic, [b"before", b"restart"])
    async with restartable.kafka_down():
        assert await closed(restartable.bootstrap)
    assert await consume(restartable.bootstrap, topic, 2) == [b"before", b"restart"]


@pytest.mark.asyncio
async def test_expire_session(cluster: LocalCluster) -> None:
    client = await kazoo(cluster.zookeeper, timeout=10.0)
    states: list[str] = []
    client.add_listener(states.append)
    try:
        session_id, password = client.client_id
        await cluster.expire_session(session_id, password)
        await wait_until(lambda: KazooState.LOST in states, timeout=20, what="the session is lost")
    finally:
        await kazoo_close(client)


# --- the command line -----------------------------------------------------------------------------


def cli(
    cache: Path, *args: str, stdout: Any = None, stderr: Any = None
) -> contextlib.AbstractAsyncContextManager[asyncio.subprocess.Process]:
    """``python -m aio_cluster.local ARGS`` with ``cache`` as its cache, running for the block."""
    return running(
        *(sys.executable, "-m", "aio_cluster.local", *args),
        cwd=REPO,
        env={**os.environ, "AIO_CLUSTER_CACHE": str(cache)},
        stdout=stdout,
        stderr=stderr,
    )


@contextlib.asynccontextmanager
async def up(cache: Path) -> AsyncIterator[tuple[asyncio.subprocess.Process, dict[str, str]]]:
    """``up`` running for the block once it printed its two export lines:
    ``(process, {variable: value})``."""
    errors = cache.parent / "up.err"
    with errors.open("wb") as stderr:
        async with cli(cache, "up", stdout=asyncio.subprocess.PIPE, stderr=stderr) as process:
            assert process.stdout is not None
            exports = {}
            for _ in range(2):
                line = (await asyncio.wait_for(process.stdout.readline(), 150)).decode()
                assert line.startswith("export "), f"up printed {line!r}; stderr: {text_of(errors)}"
                name, _, value = line.removeprefix("export ").strip().partition("=")
                exports[name] = value
            assert set(exports) == {BOOTSTRAP_VAR, ZOOKEEPER_VAR}
            yield process, exports


async def down(cache: Path) -> tuple[int | None, str]:
    async with cli(cache, "down", stderr=asyncio.subprocess.PIPE) as process:
        _, errors = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode, errors.decode()


@pytest.mark.asyncio
async def test_cli_up_and_down(own_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``down`` makes ``up`` cancel its ``async with`` body: the servers stop all the same."""
    monkeypatch.setenv(BOOTSTRAP_VAR, "127.0.0.1:1")  # up ignores these: it starts a cluster
    monkeypatch.setenv(ZOOKEEPER_VAR, "127.0.0.1:1")
    async with up(own_cache) as (process, exports):
        bootstrap, zookeeper = exports[BOOTSTRAP_VAR], exports[ZOOKEEPER_VAR]
        assert bootstrap.startswith("127.0.0.1:")
        assert await port_open(zookeeper)
        topic = await create_topic(bootstrap, prefix="local")
        await produce(bootstrap, topic, [b"via the exports"])
        assert await consume(bootstrap, topic, 1) == [b"via the exports"]

        code, errors = await down(own_cache)
        assert code == 0, errors
        assert await asyncio.wait_for(process.wait(), 30) == 0
        assert process.stdout is not None
        assert await process.stdout.read() == b"", "up printed more than the two export lines"
        said = text_of(own_cache.parent / "up.err")
        assert f"holds about {process_module.partitions_held():,} partitions" in said, said
        assert await closed(bootstrap)
        assert await closed(zookeeper)
    code, errors = await down(own_cache)
    assert code == 1
    assert "nothing running" in errors


@pytest.mark.asyncio
async def test_servers_die_with_the_python_process(own_cache: Path) -> None:
    async with up(own_cache) as (process, exports):
        process.send_signal(signal.SIGKILL)
        await process.wait()
    for address in exports.values():
        await wait_until(functools.partial(closed, address), timeout=20, what=f"{address} closed")
    code, errors = await down(own_cache)  # finds the killed up's state and clears it
    assert code == 1
    assert "nothing running" in errors


# --- bad input ------------------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("option", "service"), [("kafka_port", "Kafka"), ("zookeeper_port", "ZooKeeper")]
)
async def test_occupied_port(tmp_path: Path, option: str, service: str) -> None:
    cache = tmp_path / "cache"
    before = java_children()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cluster = LocalCluster(**{option: port}, cache_dir=cache, use_env=False)
        with pytest.raises(LocalClusterError, match=f"port {port} .*{service}"):
            await cluster.start()
    assert not cache.exists(), "Maven ran: the port is checked before anything starts"
    assert java_children() <= before


@pytest.mark.asyncio
async def test_several_nodes_without_java(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(docker, "engine_answers", lambda: True)  # Docker runs one node only
    with pytest.raises(LocalClusterError, match="3 Kafka and 1 ZooKeeper nodes needs Java 17"):
        await LocalCluster(brokers=3, use_env=False).start()


@pytest.mark.asyncio
async def test_no_java_and_no_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(docker, "engine_answers", lambda: False)
    with pytest.raises(LocalClusterError, match="Java 17"):
        await LocalCluster(use_env=False).start()


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("bootstrap", "zookeeper", "named"),
    [
        ("127.0.0.1:notaport", "127.0.0.1:2181", BOOTSTRAP_VAR),
        ("127.0.0.1", "127.0.0.1:2181", BOOTSTRAP_VAR),
        ("127.0.0.1:9092,:9093", "127.0.0.1:2181", BOOTSTRAP_VAR),
        ("127.0.0.1:9092", "127.0.0.1:zk/chroot", ZOOKEEPER_VAR),
        ("127.0.0.1:9092", "127.0.0.1:99999", ZOOKEEPER_VAR),
        ("127.0.0.1:9092", None, ZOOKEEPER_VAR),
        (None, "127.0.0.1:2181", BOOTSTRAP_VAR),
    ],
)
async def test_bad_environment(
    monkeypatch: pytest.MonkeyPatch, bootstrap: str | None, zookeeper: str | None, named: str
) -> None:
    for variable, value in ((BOOTSTRAP_VAR, bootstrap), (ZOOKEEPER_VAR, zookeeper)):
        if value is None:
            monkeypatch.delenv(variable, raising=False)
        else:
            monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError, match=named) as raised:
        await LocalCluster().start()
    bad = bootstrap if named == BOOTSTRAP_VAR else zookeeper
    assert bad is None or bad in str(raised.value)


@pytest.mark.asyncio
async def test_unreachable_environment_fails_within_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    monkeypatch.setenv(BOOTSTRAP_VAR, f"127.0.0.1:{port}")
    monkeypatch.setenv(ZOOKEEPER_VAR, f"127.0.0.1:{port}")
    with pytest.raises(LocalClusterError, match="did not answer within 1 s"):
        await LocalCluster(startup_timeout=1.0).start()


def test_bad_arguments() -> None:
    with pytest.raises(ConfigurationError, match="kafka_port"):
        LocalCluster(kafka_port=70000)
    with pytest.raises(ConfigurationError, match="both 9092"):
        LocalCluster(kafka_port=9092, zookeeper_port=9092)
    with pytest.raises(ConfigurationError, match="max_session_timeout_ms"):
        LocalCluster(max_session_timeout_ms=500)
    with pytest.raises(ConfigurationError, match="brokers=0"):
        LocalCluster(brokers=0)
    with pytest.raises(ConfigurationError, match="zookeepers=-1"):
        LocalCluster(zookeepers=-1)
    with pytest.raises(ConfigurationError, match="kafka_port names one port; with brokers=3"):
        LocalCluster(brokers=3, kafka_port=9092)
    with pytest.raises(ConfigurationError, match="zookeeper_port names one port"):
        LocalCluster(zookeepers=3, zookeeper_port=2181)
    with pytest.raises(ConfigurationError, match=r"one rack .* for each of 3 brokers"):
        LocalCluster(brokers=3, racks=["a", "b"])
    for wrong in ([1, 2, 3], ["a", " b", "c"], "abc"):
        with pytest.raises(ConfigurationError, match=r"one rack .* for each of 3 brokers"):
            LocalCluster(brokers=3, racks=wrong)  # type: ignore[arg-type]


def test_brokers_in_racks_get_their_rack_and_the_rack_aware_selector() -> None:
    assert rack_properties("a") == {
        "broker.rack": "a",
        "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
    }


@pytest.mark.asyncio
async def test_lifecycle() -> None:
    cluster = LocalCluster()
    with pytest.raises(LocalClusterError, match="new, not running"):
        _ = cluster.bootstrap
    await cluster.stop()
    await cluster.stop()
    with pytest.raises(LocalClusterError, match="stopped; make a new one"):
        await cluster.start()


# --- the environment and Docker -------------------------------------------------------------------


@pytest.mark.asyncio
async def test_environment_names_a_running_cluster(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BOOTSTRAP_VAR, cluster.bootstrap)
    monkeypatch.setenv(ZOOKEEPER_VAR, cluster.zookeeper)
    before = java_children()
    async with LocalCluster(startup_timeout=10) as external:
        assert java_children() == before
        assert external.mode == "environment"
        assert (external.bootstrap, external.zookeeper) == (cluster.bootstrap, cluster.zookeeper)
        with pytest.raises(LocalClusterError, match="started with Java"):
            await external.stop_kafka()
    assert await port_open(cluster.bootstrap), "stopping it left the named cluster alone"


# Not server_free: it runs Maven twice (JVMs, ten CPU-seconds the same on every Python), so
# tests_compat leaves it to the whole suite.
@pytest.mark.own_cluster
@pytest.mark.asyncio
async def test_jar_fetch_is_locked_and_an_interrupted_one_redone(tmp_path: Path) -> None:
    first, second = await asyncio.gather(
        jars.resolve_jars(tmp_path, "zookeeper"), jars.resolve_jars(tmp_path, "zookeeper")
    )
    assert first == second
    jar = next(first.glob("zookeeper-3.*.jar"))
    (first / ".complete").unlink()  # as if the copy had been interrupted
    jar.unlink()
    assert await jars.resolve_jars(tmp_path, "zookeeper") == first
    assert jar.exists()


@pytest.mark.docker
@pytest.mark.own_cluster
@pytest.mark.asyncio
async def test_docker_where_no_java(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not await asyncio.to_thread(docker.engine_answers):
        pytest.skip("no Docker engine answers")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    async with LocalCluster(use_env=False, startup_timeout=300) as cluster:
        assert cluster.mode == "docker"
        bootstrap = cluster.bootstrap
        topic = await create_topic(bootstrap, prefix="local")
        await produce(bootstrap, topic, [b"in a container"])
        assert await consume(bootstrap, topic, 1) == [b"in a container"]
        assert await port_open(cluster.zookeeper)
    assert await closed(bootstrap)


@pytest.mark.asyncio
async def test_a_server_may_open_as_many_files_as_the_hard_limit_allows(tmp_path: Path) -> None:
    """Kafka keeps a file open per partition: the launcher raises each child's soft limit."""
    log = tmp_path / "limit.log"
    child = process_module.Child("shell", ["sh", "-c", "ulimit -Sn"], log)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))  # a low soft limit
    try:
        await child.run(asyncio.get_running_loop().time() + 30)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert int(log.read_text()) == hard == process_module.open_files_limit()


@pytest.mark.asyncio
async def test_grant_and_revoke_name_acls_the_same_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """`revoke()` takes `grant()`'s arguments and removes what it adds (the tool not run)."""
    told: list[list[str]] = []

    async def tool(_self: LocalCluster, _main: str, arguments: list[str]) -> None:
        told.append(arguments)

    monkeypatch.setattr(LocalCluster, "_kafka_tool", tool)
    cluster = LocalCluster(use_env=False)
    resources: dict[str, Any] = {"transactional_id": "aio-cluster.", "prefixed": True}
    await cluster.grant("u", "Write", "Describe", **resources)
    await cluster.revoke("u", "Write", "Describe", **resources)
    added, removed = told
    assert added[0] == "--add"
    assert removed[:2] == ["--remove", "--force"]
    assert added[1:] == removed[2:]
    assert added[-4:] == [
        *("--transactional-id", "aio-cluster."),
        *("--resource-pattern-type", "prefixed"),
    ]
    with pytest.raises(ConfigurationError, match="name a resource"):
        await cluster.revoke("u", "Read")
