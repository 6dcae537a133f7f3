"""A local single-node ZooKeeper + Kafka for the demo, the benchmarks and the tests.

::

    async with LocalCluster() as cluster:
        consume(cluster.bootstrap, cluster.zookeeper)

Where the cluster comes from, in this order:

1. ``AIO_CLUSTER_BOOTSTRAP`` and ``AIO_CLUSTER_ZOOKEEPER`` (both set, ``use_env=True``): a running
   cluster, e.g. the one of the project's ``docker-compose.yml``; nothing is started.
2. Java 17+ (``$JAVA_HOME/bin/java`` or ``java`` on ``PATH``): Kafka (KRaft, broker and controller
   in one JVM) and ZooKeeper run as two JVMs on 127.0.0.1, their data in a temporary directory
   removed on stop. The jars are fetched once with Maven from ``aio_cluster/jars/pom.xml`` into a
   cache outside the repository (``$AIO_CLUSTER_CACHE`` or ``~/.cache/aio-cluster``), so later
   starts download nothing and start in a few seconds.
3. A Docker engine (and testcontainers installed): the same two servers as containers.

The JVMs never outlive their owner: stopping ends each one's process group (SIGTERM, then SIGKILL),
also when the ``async with`` body is cancelled, and on Linux the kernel kills them should the Python
process itself die (``PR_SET_PDEATHSIG``). For the tests of faults a Java-started cluster can stop
and restart each server on the same port with the same data, and expire a ZooKeeper session.

For people there is a command line (also installed as ``aio-cluster-local``)::

    $ python -m aio_cluster.local up        # prints two lines once the cluster is ready:
    export AIO_CLUSTER_BOOTSTRAP=127.0.0.1:40123
    export AIO_CLUSTER_ZOOKEEPER=127.0.0.1:40125
    $ python -m aio_cluster.local down      # from another shell; or Ctrl-C / SIGTERM to ``up``

Paste the two lines into another shell to point the tests and the demo at that cluster. POSIX
only.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import ctypes
import enum
import fcntl
import functools
import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Literal

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from . import zk
from .errors import ConfigurationError, LocalClusterError
from .kafka import parse_bootstrap

if TYPE_CHECKING:
    from testcontainers.core.container import DockerContainer

__all__ = ["LocalCluster", "Mode", "main"]

_log = logging.getLogger("aio_cluster.local")  # also when run as __main__

_BOOTSTRAP_VAR = "AIO_CLUSTER_BOOTSTRAP"
_ZOOKEEPER_VAR = "AIO_CLUSTER_ZOOKEEPER"
_CACHE_VAR = "AIO_CLUSTER_CACHE"

_JARS = Path(__file__).parent / "jars"
_HOST = "127.0.0.1"  # never "localhost": it may resolve to ::1, where nothing listens
_STOP_GRACE = 15.0  # seconds between SIGTERM and SIGKILL
_POLL_INTERVAL = 0.2  # seconds between two probes of a starting server
_MAVEN_TIMEOUT = 600.0  # a cold fetch of the jars takes ~20 s on a good line
_MIN_SESSION_TIMEOUT_MS = 1000
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>

_ZOOKEEPER_IMAGE = "zookeeper:3.9"
_KAFKA_IMAGE = "apache/kafka:4.4.0"

Mode = Literal["java", "docker", "environment"]


class _State(enum.Enum):
    """The life of a LocalCluster: NEW -> STARTING -> RUNNING -> STOPPED, or STARTING -> STOPPED
    when the start fails. It runs once: a stopped cluster's data is gone."""

    NEW = "new"
    STARTING = "starting"
    RUNNING = "running"
    STOPPED = "stopped"


class LocalCluster:
    """One ZooKeeper and one Kafka broker for development and tests.

    Use it as ``async with LocalCluster() as cluster:`` or call :meth:`start` and :meth:`stop`.
    Once started, :attr:`bootstrap` and :attr:`zookeeper` say where the servers are. The fault
    hooks (:meth:`stop_zookeeper`, :meth:`start_kafka`, ...) need a cluster this object started
    with Java.

    The broker does not create topics on first use (``auto.create.topics.enable=false``): a test of
    an unknown topic sees it unknown. Create topics with an admin client.
    """

    def __init__(
        self,
        *,
        kafka_port: int | None = None,
        zookeeper_port: int | None = None,
        cache_dir: Path | None = None,
        startup_timeout: float = 90.0,
        max_session_timeout_ms: int = 60000,
        use_env: bool = True,
    ) -> None:
        """Configure the cluster; nothing starts before :meth:`start`.

        Args:
            kafka_port: Kafka's port on 127.0.0.1; None picks a free one.
            zookeeper_port: ZooKeeper's port on 127.0.0.1; None picks a free one.
            cache_dir: where the jars are kept between runs; default ``$AIO_CLUSTER_CACHE`` or
                ``~/.cache/aio-cluster``.
            startup_timeout: seconds the servers have to answer requests after they were started
                (on a loaded 2-core machine Kafka may take tens of seconds).
            max_session_timeout_ms: the longest ZooKeeper session the server grants; the shortest
                is 1000 ms, so that tests of session expiry can use 1-second sessions.
            use_env: use the cluster named by ``AIO_CLUSTER_BOOTSTRAP`` and
                ``AIO_CLUSTER_ZOOKEEPER`` when both are set, instead of starting one (the ports
                asked for are then ignored).

        Raises:
            ConfigurationError: a port outside 1..65535, both ports equal, a non-positive
                timeout, or a session bound below 1000 ms.
        """
        for name, port in (("kafka_port", kafka_port), ("zookeeper_port", zookeeper_port)):
            if port is not None and not 0 < port < 65536:
                raise ConfigurationError(f"{name}={port} is not a TCP port (1..65535)")
        if kafka_port is not None and kafka_port == zookeeper_port:
            raise ConfigurationError(f"kafka_port and zookeeper_port are both {kafka_port}")
        if startup_timeout <= 0:
            raise ConfigurationError(f"startup_timeout={startup_timeout} must be positive")
        if max_session_timeout_ms < _MIN_SESSION_TIMEOUT_MS:
            raise ConfigurationError(
                f"max_session_timeout_ms={max_session_timeout_ms} is below the minimum session "
                f"timeout of {_MIN_SESSION_TIMEOUT_MS} ms"
            )
        self._kafka_port = kafka_port
        self._zookeeper_port = zookeeper_port
        self._cache_dir = cache_dir if cache_dir is not None else _default_cache_dir()
        self._startup_timeout = startup_timeout
        self._max_session_timeout_ms = max_session_timeout_ms
        self._use_env = use_env
        self._state = _State.NEW
        self._mode: Mode | None = None
        self._bootstrap = ""
        self._zookeeper = ""
        self._data_dir: Path | None = None
        self._zookeeper_jvm: _Child | None = None
        self._kafka_jvm: _Child | None = None
        self._containers: _Containers | None = None

    @property
    def bootstrap(self) -> str:
        """Kafka's bootstrap servers, ``"127.0.0.1:PORT"`` (or as the environment named them)."""
        self._require_running()
        return self._bootstrap

    @property
    def zookeeper(self) -> str:
        """ZooKeeper's connect string, ``"127.0.0.1:PORT"`` (or as the environment named it)."""
        self._require_running()
        return self._zookeeper

    @property
    def mode(self) -> Mode:
        """Where the servers came from: started with ``"java"`` or ``"docker"``, or found through
        the ``"environment"``."""
        self._require_running()
        assert self._mode is not None
        return self._mode

    async def __aenter__(self) -> LocalCluster:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        """Start the cluster (or find it through the environment) and return once both servers
        answer requests. Does nothing when the cluster is running already.

        Raises:
            ConfigurationError: an ``AIO_CLUSTER_*`` variable is malformed, or only one is set.
            LocalClusterError: a port asked for is taken, neither Java nor Docker is found, a
                server exits early or does not answer within ``startup_timeout`` (the message
                quotes the end of its log), or the cluster was stopped already.
        """
        if self._state is _State.RUNNING:
            return
        if self._state is not _State.NEW:
            raise LocalClusterError(f"this LocalCluster is {self._state.value}; make a new one")
        self._state = _State.STARTING
        began = time.monotonic()
        try:
            await self._start()
        except BaseException:
            await _shielded(self._release())
            self._state = _State.STOPPED
            raise
        self._state = _State.RUNNING
        _log.info(
            "Kafka %s and ZooKeeper %s ready (%s) in %.1f s",
            self._bootstrap,
            self._zookeeper,
            self._mode,
            time.monotonic() - began,
        )

    async def stop(self) -> None:
        """Stop the servers this object started and remove their data; finishes even when the
        caller is cancelled meanwhile. Does nothing when there is nothing to stop."""
        if self._state is _State.STOPPED:
            return
        await _shielded(self._release())
        self._state = _State.STOPPED

    async def stop_zookeeper(self) -> None:
        """Stop ZooKeeper (a fault for tests); its data stays for :meth:`start_zookeeper`.

        Raises:
            LocalClusterError: this object did not start the cluster with Java.
        """
        await self._jvm("zookeeper").stop()

    async def start_zookeeper(self) -> None:
        """Start ZooKeeper again on the same port with the same data, and wait until it answers.

        Raises:
            LocalClusterError: this object did not start the cluster with Java, or ZooKeeper did
                not answer within ``startup_timeout``.
        """
        await self._jvm("zookeeper").start(self._deadline())

    async def stop_kafka(self) -> None:
        """Stop Kafka (a fault for tests); its data stays for :meth:`start_kafka`.

        Raises:
            LocalClusterError: this object did not start the cluster with Java.
        """
        await self._jvm("kafka").stop()

    async def start_kafka(self) -> None:
        """Start Kafka again on the same port with the same data, and wait until it answers.

        Raises:
            LocalClusterError: this object did not start the cluster with Java, or Kafka did not
                answer within ``startup_timeout``.
        """
        await self._jvm("kafka").start(self._deadline())

    @contextlib.asynccontextmanager
    async def zookeeper_down(self) -> AsyncIterator[None]:
        """ZooKeeper stopped for the duration of the block, running again after it (also when
        the block fails; not when it is cancelled or interrupted)."""
        async with self._down(self.stop_zookeeper, self.start_zookeeper):
            yield

    @contextlib.asynccontextmanager
    async def kafka_down(self) -> AsyncIterator[None]:
        """Kafka stopped for the duration of the block, running again after it (also when the
        block fails; not when it is cancelled or interrupted)."""
        async with self._down(self.stop_kafka, self.start_kafka):
            yield

    async def expire_session(self, session_id: int, password: bytes) -> None:
        """Make the ZooKeeper server expire a client's session, as a fault for tests.

        Works with any running cluster: it only joins and closes the session.

        Args:
            session_id: the session's id, as its client knows it.
            password: the session's password, as its client knows it.

        Raises:
            LocalClusterError: the cluster is not running.
            CoordinationTimeout: ZooKeeper did not let us join the session in time.
        """
        await zk.expire_session(self.zookeeper, session_id, password)

    def _require_running(self) -> None:
        if self._state is not _State.RUNNING:
            raise LocalClusterError(f"the local cluster is {self._state.value}, not running")

    def _jvm(self, service: Literal["zookeeper", "kafka"]) -> _Child:
        self._require_running()
        jvm = self._zookeeper_jvm if service == "zookeeper" else self._kafka_jvm
        if jvm is None:
            raise LocalClusterError(
                f"stopping and starting {service} needs a cluster this LocalCluster started with "
                f"Java; this one came from {self._mode}"
            )
        return jvm

    def _deadline(self) -> float:
        return asyncio.get_running_loop().time() + self._startup_timeout

    @contextlib.asynccontextmanager
    async def _down(
        self, stop: Callable[[], Awaitable[None]], start: Callable[[], Awaitable[None]]
    ) -> AsyncIterator[None]:
        await stop()
        try:
            yield
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise  # shutting down: stop() cleans up, starting the server again would only delay
        except BaseException:  # a failed assertion, pytest.fail: the next test wants the server
            await start()
            raise
        await start()

    async def _start(self) -> None:
        if self._use_env and (found := _cluster_from_env()) is not None:
            self._mode = "environment"
            self._bootstrap, self._zookeeper = found
            await self._wait_external(self._deadline())
            return
        # Ports first: a port asked for and taken fails at once, before Maven or a JVM runs.
        for service, port in (("Kafka", self._kafka_port), ("ZooKeeper", self._zookeeper_port)):
            if port is not None:
                _check_port_free(port, service)
        kafka_port, zookeeper_port, controller_port = _free_ports(
            self._kafka_port, self._zookeeper_port, None
        )
        self._bootstrap = f"{_HOST}:{kafka_port}"
        self._zookeeper = f"{_HOST}:{zookeeper_port}"
        java = _find_java()
        if java is not None:
            self._mode = "java"
            await self._start_java(java, kafka_port, zookeeper_port, controller_port)
        elif await asyncio.to_thread(_docker_engine_answers):
            self._mode = "docker"
            await self._start_docker(kafka_port, zookeeper_port)
        else:
            raise LocalClusterError(
                "the local cluster needs Java 17 or newer ($JAVA_HOME/bin/java or java on PATH) "
                "or a Docker engine (with testcontainers installed), and neither was found; or "
                f"set {_BOOTSTRAP_VAR} and {_ZOOKEEPER_VAR} to use a running cluster"
            )

    async def _start_java(
        self, java: str, kafka_port: int, zookeeper_port: int, controller_port: int
    ) -> None:
        kafka_jars = await _resolve_jars(self._cache_dir, "kafka")
        zookeeper_jars = await _resolve_jars(self._cache_dir, "zookeeper")
        self._data_dir = data = Path(tempfile.mkdtemp(prefix="aio-cluster-"))
        _log.info(
            "starting ZooKeeper on %s and Kafka on %s (data in %s)",
            self._zookeeper,
            self._bootstrap,
            data,
        )
        zoo_cfg = data / "zoo.cfg"
        _write_properties(
            zoo_cfg,
            _zookeeper_config(zookeeper_port, data / "zookeeper", self._max_session_timeout_ms),
        )
        server_properties = data / "server.properties"
        _write_properties(
            server_properties,
            _kafka_properties(
                listen_host=_HOST,
                port=kafka_port,
                controller_port=controller_port,
                log_dir=str(data / "kafka"),
            ),
        )
        zookeeper_log, kafka_log = data / "zookeeper.log", data / "kafka.log"
        self._zookeeper_jvm = _Child(
            "ZooKeeper",
            _java_command(java, zookeeper_jars, _ZOOKEEPER_HEAP, _ZOOKEEPER_MAIN, str(zoo_cfg)),
            zookeeper_log,
            functools.partial(_zookeeper_answers, self._zookeeper),
        )
        self._kafka_jvm = _Child(
            "Kafka",
            _java_command(java, kafka_jars, _KAFKA_HEAP, "kafka.Kafka", str(server_properties)),
            kafka_log,
            functools.partial(_kafka_answers, self._bootstrap),
        )
        storage_format = _Child(
            "Kafka's storage format",
            _java_command(
                java,
                kafka_jars,
                _TOOL_FLAGS,
                "kafka.tools.StorageTool",
                "format",
                "--cluster-id",
                _kafka_cluster_id(),
                "--config",
                str(server_properties),
                "--ignore-formatted",
            ),
            kafka_log,
        )
        deadline = self._deadline()
        # ZooKeeper boots while the storage is formatted; then both are awaited.
        await self._zookeeper_jvm.spawn()
        try:
            await storage_format.run(deadline)
        finally:
            await storage_format.stop()
        await self._kafka_jvm.spawn()
        await self._zookeeper_jvm.wait_ready(deadline)
        await self._kafka_jvm.wait_ready(deadline)

    async def _start_docker(self, kafka_port: int, zookeeper_port: int) -> None:
        _log.info("no Java found: starting ZooKeeper and Kafka in Docker")
        self._containers = _Containers(kafka_port, zookeeper_port, self._max_session_timeout_ms)
        await asyncio.to_thread(self._containers.start)
        await self._wait_external(self._deadline())

    async def _wait_external(self, deadline: float) -> None:
        """Wait until servers this object does not run as its children answer."""
        loop = asyncio.get_running_loop()
        for name, probe, address in (
            ("ZooKeeper", _zookeeper_answers, self._zookeeper),
            ("Kafka", _kafka_answers, self._bootstrap),
        ):
            while not await probe(address, _attempt_timeout(deadline)):
                if loop.time() >= deadline:
                    raise LocalClusterError(
                        f"{name} at {address} did not answer within {self._startup_timeout:g} s"
                    )
                await asyncio.sleep(_POLL_INTERVAL)

    async def _release(self) -> None:
        """Stop whatever was started and remove the data; safe to repeat."""
        jvms = [jvm for jvm in (self._kafka_jvm, self._zookeeper_jvm) if jvm is not None]
        await asyncio.gather(*(jvm.stop() for jvm in jvms))
        if self._containers is not None:
            await asyncio.to_thread(self._containers.stop)
        if self._data_dir is not None:
            shutil.rmtree(self._data_dir, ignore_errors=True)
        if jvms or self._containers is not None:
            _log.info("local cluster stopped")


class _Child:
    """A child process: a server (with a probe that tells when it answers) or a tool (Maven, the
    storage format), with its command line and the log file its output goes to."""

    def __init__(
        self,
        name: str,
        command: list[str],
        log: Path,
        probe: Callable[[float], Awaitable[bool]] | None = None,
    ) -> None:
        self.name = name
        self._command = command
        self._log = log
        self._probe = probe
        self._process: asyncio.subprocess.Process | None = None

    async def spawn(self) -> None:
        """Start the process, unless it runs already; its output is appended to the log."""
        if self._process is not None and self._process.returncode is None:
            return
        with self._log.open("ab") as log:
            self._process = await _spawn(self._command, log)

    async def start(self, deadline: float) -> None:
        """Start the process and wait until it answers."""
        await self.spawn()
        await self.wait_ready(deadline)

    async def wait_ready(self, deadline: float) -> None:
        """Poll the probe until it succeeds; fail when the process exits or time runs out."""
        assert self._process is not None
        assert self._probe is not None
        loop = asyncio.get_running_loop()
        while True:
            if self._process.returncode is not None:
                raise self._failure(
                    f"exited with code {self._process.returncode} before it was ready"
                )
            if loop.time() >= deadline:
                raise self._failure("did not answer in time")
            if await self._probe(_attempt_timeout(deadline)):
                return
            await asyncio.sleep(_POLL_INTERVAL)

    async def run(self, deadline: float) -> None:
        """Start the process and wait for its successful exit (a tool, not a server)."""
        await self.spawn()
        assert self._process is not None
        left = deadline - asyncio.get_running_loop().time()
        try:
            code = await asyncio.wait_for(self._process.wait(), max(left, 0.1))
        except asyncio.TimeoutError:
            raise self._failure("did not finish in time") from None
        if code != 0:
            raise self._failure(f"failed with exit code {code}")

    async def stop(self) -> None:
        """End the process group: SIGTERM, and SIGKILL if it is still there after a grace time."""
        process = self._process
        if process is None or process.returncode is not None:
            return
        _signal_group(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), _STOP_GRACE)
        except asyncio.TimeoutError:
            _log.warning("%s ignored SIGTERM for %g s: killing it", self.name, _STOP_GRACE)
            _signal_group(process.pid, signal.SIGKILL)
            await process.wait()

    def _failure(self, what: str) -> LocalClusterError:
        return LocalClusterError(f"{self.name} {what}; the end of its log:\n{_log_tail(self._log)}")


class _Containers:
    """The Docker fallback: ZooKeeper and Kafka (KRaft) as testcontainers, on fixed host ports so
    that Kafka can advertise the address clients reach it at. Docker publishes the ports on every
    interface of the host; the clients use 127.0.0.1. Blocking: call it from a thread."""

    def __init__(self, kafka_port: int, zookeeper_port: int, max_session_timeout_ms: int) -> None:
        from testcontainers.core.container import DockerContainer  # noqa: PLC0415 (optional)

        zookeeper_env = {
            "ZOO_TICK_TIME": "500",
            "ZOO_4LW_COMMANDS_WHITELIST": "srvr,ruok,stat,cons",
            "ZOO_ADMINSERVER_ENABLED": "false",
            "ZOO_MAX_CLIENT_CNXNS": "0",
            "ZOO_CFG_EXTRA": f"minSessionTimeout={_MIN_SESSION_TIMEOUT_MS} "
            f"maxSessionTimeout={max_session_timeout_ms}",
        }
        properties = _kafka_properties(
            listen_host="0.0.0.0",
            port=kafka_port,
            controller_port=9093,
            log_dir="/tmp/kraft-combined-logs",  # the image's own, writable by its user
        )
        # The apache/kafka image configures the broker from KAFKA_* variables: dots become "_".
        kafka_env = {"KAFKA_" + key.upper().replace(".", "_"): v for key, v in properties.items()}
        kafka_env["CLUSTER_ID"] = _kafka_cluster_id()
        self._containers: list[DockerContainer] = [
            DockerContainer(_ZOOKEEPER_IMAGE)
            .with_envs(**zookeeper_env)
            .with_bind_ports(2181, zookeeper_port),
            DockerContainer(_KAFKA_IMAGE)
            .with_envs(**kafka_env)
            .with_bind_ports(kafka_port, kafka_port),
        ]

    def start(self) -> None:
        for container in self._containers:
            container.start()

    def stop(self) -> None:
        for container in reversed(self._containers):
            with contextlib.suppress(Exception):  # never started, or gone already
                container.stop()


# --- the JVMs -------------------------------------------------------------------------------------

# Sized for a 2-core machine with plenty of memory, where the tests run next to both servers.
_KAFKA_HEAP = ("-Xms256m", "-Xmx768m")
_ZOOKEEPER_HEAP = ("-Xms64m", "-Xmx256m")
_TOOL_FLAGS = ("-Xmx256m", "-XX:TieredStopAtLevel=1")  # short-lived: C1 alone starts faster
_ZOOKEEPER_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


def _java_command(
    java: str, jars: Path, heap: Sequence[str], main_class: str, *args: str
) -> list[str]:
    return [
        java,
        *heap,
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.net.preferIPv4Stack=true",
        f"-Dlog4j2.configurationFile={_JARS / 'log4j2.yaml'}",
        "-cp",
        f"{jars}/*",
        main_class,
        *args,
    ]


def _zookeeper_config(port: int, data_dir: Path, max_session_timeout_ms: int) -> dict[str, str]:
    return {
        "tickTime": "500",
        "minSessionTimeout": str(_MIN_SESSION_TIMEOUT_MS),
        "maxSessionTimeout": str(max_session_timeout_ms),
        "dataDir": str(data_dir),
        "clientPort": str(port),
        "clientPortAddress": _HOST,
        "admin.enableServer": "false",
        "4lw.commands.whitelist": "srvr,ruok,stat,cons,mntr",
        "maxClientCnxns": "0",  # the default of 60 per address is low for a test suite on one host
        "forceSync": "no",  # written data survives the process, not the machine: enough here
    }


def _kafka_properties(
    *, listen_host: str, port: int, controller_port: int, log_dir: str
) -> dict[str, str]:
    return {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{_HOST}:{controller_port}",
        "listeners": f"PLAINTEXT://{listen_host}:{port},CONTROLLER://{_HOST}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{_HOST}:{port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": log_dir,
        "auto.create.topics.enable": "false",  # an unknown topic stays unknown, as tests expect
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "share.coordinator.state.topic.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
        "num.network.threads": "2",
        "num.io.threads": "2",
        "background.threads": "2",
        "log.cleaner.dedupe.buffer.size": "2097152",  # 128 MiB by default, allocated at start
    }


def _write_properties(path: Path, properties: dict[str, str]) -> None:
    path.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))


def _kafka_cluster_id() -> str:
    """A random cluster id as Kafka writes them: 22 characters of URL-safe base64, not starting
    with "-" (which the storage tool would take for an option)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def _find_java() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(candidate := Path(java_home, "bin", "java"), os.X_OK):
        return str(candidate)
    return shutil.which("java")


def _docker_engine_answers() -> bool:
    """Whether a Docker engine answers and testcontainers is there to use it. Blocking."""
    try:
        from testcontainers.core.docker_client import (  # noqa: PLC0415 (optional)
            DockerClient,
            get_docker_host,
        )
    except ImportError:
        return False
    # With no host configured docker-py uses the local socket; where there is none, asking anyway
    # would leak the socket of docker-py's failed request (a ResourceWarning).
    if get_docker_host() is None and not Path("/var/run/docker.sock").is_socket():
        return False
    try:
        client = DockerClient(timeout=5).client
    except Exception:  # no engine behind the socket, no permission: both mean "no Docker"
        return False
    try:
        return bool(client.ping())
    except Exception:
        return False
    finally:
        client.close()


# --- processes ------------------------------------------------------------------------------------


async def _spawn(command: Sequence[str], output: IO[bytes] | int) -> asyncio.subprocess.Process:
    """Start a child in a process group of its own (so that stopping reaches all of it) that the
    kernel kills when this process dies."""
    return await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=output,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_die_with_parent(),
    )


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec function that has Linux SIGKILL the child when its parent dies.

    The kernel sends the signal when the *thread* that forked the child ends, so children must be
    spawned from a thread that lives as long as the process: the event loop's, normally the main
    thread.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = _libc().prctl  # looked up here: the child between fork and exec only calls it
    parent = os.getpid()

    def set_death_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL))
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(1)

    return set_death_signal


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal the process group ``pid`` leads (started with ``start_new_session``)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


async def _shielded(cleanup: Coroutine[Any, Any, None]) -> None:
    """Run ``cleanup`` to its end even when the caller is cancelled meanwhile (Ctrl-C must not
    leave servers behind), then let the cancellation go on."""
    task = asyncio.ensure_future(cleanup)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    task.result()


def _log_tail(path: Path, lines: int = 30) -> str:
    try:
        with path.open("rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - 16384))
            text = log.read().decode(errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"


# --- jars -----------------------------------------------------------------------------------------


def _default_cache_dir() -> Path:
    return Path(os.environ.get(_CACHE_VAR) or Path.home() / ".cache" / "aio-cluster")


async def _resolve_jars(cache_dir: Path, profile: Literal["kafka", "zookeeper"]) -> Path:
    """The directory of one classpath, fetched with Maven on first use.

    The cache is keyed by a digest of the pom, so that a changed pom gets fresh jars; a marker file
    written last tells a complete copy from an interrupted one; a file lock keeps two processes
    from copying at once.
    """
    pom = _JARS / "pom.xml"
    target = cache_dir / hashlib.sha256(pom.read_bytes()).hexdigest()[:16] / profile
    marker = target / ".complete"
    if marker.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    async with _file_lock(target.parent / f"{profile}.lock"):
        if marker.exists():  # another process fetched them while we waited
            return target
        mvn = shutil.which("mvn")
        if mvn is None:
            raise LocalClusterError(
                f"Maven (mvn) is needed once, to fetch the {profile} jars into {target}"
            )
        _log.info("fetching the %s jars with Maven into %s (first start only)", profile, target)
        shutil.rmtree(target, ignore_errors=True)
        command = [
            mvn,
            "-B",
            "-q",
            f"-P{profile}",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={target}",
        ]
        maven_log = target.parent / f"{profile}-maven.log"
        maven_log.unlink(missing_ok=True)
        maven = _Child(f"Maven fetching the {profile} jars", command, maven_log)
        try:
            await maven.run(asyncio.get_running_loop().time() + _MAVEN_TIMEOUT)
        finally:
            await maven.stop()
        marker.write_text(f"{time.time()}\n")
    return target


@contextlib.asynccontextmanager
async def _file_lock(path: Path) -> AsyncIterator[None]:
    """An exclusive flock on ``path``, polled so that waiting for it stays cancellable."""
    with path.open("a") as lock:
        deadline = time.monotonic() + _MAVEN_TIMEOUT
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LocalClusterError(f"{path} stayed locked by another process") from None
                await asyncio.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# --- ports and probes -----------------------------------------------------------------------------


def _check_port_free(port: int, service: str) -> None:
    with socket.socket() as sock:
        # As the servers bind: SO_REUSEADDR lets a port with closed connections in TIME_WAIT be
        # reused, but not one another process listens on.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((_HOST, port))
        except OSError as exc:
            raise LocalClusterError(
                f"port {port} on {_HOST}, asked for {service}, is already in use ({exc.strerror})"
            ) from exc


def _free_ports(*wanted: int | None) -> list[int]:
    """Each wanted port, or a free one for each None (held open together, so all differ)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for port in wanted:
            if port is not None:
                ports.append(port)
                continue
            sock = stack.enter_context(socket.socket())
            sock.bind((_HOST, 0))
            ports.append(sock.getsockname()[1])
        return ports


async def _port_open(host: str, port: int, timeout: float) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, asyncio.TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


def _attempt_timeout(deadline: float) -> float:
    """The bound on one probe: short, so that an early exit is noticed soon, and within the
    deadline."""
    return max(0.1, min(deadline - asyncio.get_running_loop().time(), 5.0))


def _servers(addresses: str) -> list[tuple[str, int]]:
    """``[(host, port)]`` of a validated ``"h1:p1,h2:p2[/chroot]"``."""
    servers = [server.strip().rpartition(":") for server in addresses.partition("/")[0].split(",")]
    return [(host.strip("[]"), int(port)) for host, _, port in servers]


async def _zookeeper_answers(connect: str, timeout: float) -> bool:
    """Whether a ZooKeeper server of ``connect`` serves: ``srvr`` names the version only then."""

    async def ask(host: str, port: int) -> bytes:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(b"srvr")
            await writer.drain()
            return await reader.read()
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    for host, port in _servers(connect):
        try:
            if b"Zookeeper version" in await asyncio.wait_for(ask(host, port), timeout):
                return True
        except (OSError, asyncio.TimeoutError):
            continue
    return False


async def _kafka_answers(bootstrap: str, timeout: float) -> bool:
    """Whether Kafka answers a metadata request naming at least one broker."""
    # A plain connection first: aiokafka would log an error for each attempt while Kafka boots.
    for host, port in _servers(bootstrap):
        if await _port_open(host, port, timeout):
            break
    else:
        return False
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout * 1000))
    try:
        await asyncio.wait_for(admin.start(), timeout)
        cluster = await asyncio.wait_for(admin.describe_cluster(), timeout)
    except (KafkaError, OSError, asyncio.TimeoutError):
        return False
    finally:
        await admin.close()
    return bool(cluster["brokers"])


# --- the environment ------------------------------------------------------------------------------


def _cluster_from_env() -> tuple[str, str] | None:
    """``(bootstrap, zookeeper)`` from the environment, or None when neither variable is set.

    Raises:
        ConfigurationError: only one is set, or one is malformed.
    """
    bootstrap = os.environ.get(_BOOTSTRAP_VAR, "").strip()
    zookeeper = os.environ.get(_ZOOKEEPER_VAR, "").strip()
    if not bootstrap and not zookeeper:
        return None
    if not bootstrap or not zookeeper:
        have, missing = (
            (_BOOTSTRAP_VAR, _ZOOKEEPER_VAR) if bootstrap else (_ZOOKEEPER_VAR, _BOOTSTRAP_VAR)
        )
        raise ConfigurationError(
            f"{have} is set but {missing} is not: set both to use a running cluster, or neither"
        )
    try:
        servers = ",".join(parse_bootstrap(bootstrap))
    except ConfigurationError as exc:
        raise ConfigurationError(f"{_BOOTSTRAP_VAR}={bootstrap!r}: {exc}") from exc
    try:
        connect = zk.parse_hosts(zookeeper)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{_ZOOKEEPER_VAR}={zookeeper!r}: {exc}") from exc
    return servers, connect


# --- the command line -----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """The ``aio-cluster-local`` command: ``up`` starts a cluster and prints its two ``export``
    lines, ``down`` stops the running ``up``.

    Args:
        argv: the arguments after the program name; default ``sys.argv[1:]``.

    Returns:
        The exit status: 0 on success, 1 on failure (the reason on stderr).
    """
    parser = argparse.ArgumentParser(
        prog="aio-cluster-local",
        description="A local single-node ZooKeeper + Kafka for aio_cluster development.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser(
        "up",
        help="start a cluster, print its export lines, stay up until Ctrl-C, SIGTERM or down",
    )
    up.add_argument("--kafka-port", type=int, help="Kafka's port (default: a free one)")
    up.add_argument("--zookeeper-port", type=int, help="ZooKeeper's port (default: a free one)")
    commands.add_parser("down", help="stop the cluster of the running up")
    args = parser.parse_args(argv)

    # Progress to stderr: this module's at INFO, aiokafka's and kazoo's only when they warn.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(name)s: %(message)s")
    _log.setLevel(logging.INFO)

    state = _default_cache_dir() / "run" / "up.json"
    if args.command == "down":
        return _down(state)
    try:
        return asyncio.run(_up(state, args.kafka_port, args.zookeeper_port))
    except (ConfigurationError, LocalClusterError) as exc:
        print(f"aio-cluster-local: {exc}", file=sys.stderr)
        return 1


async def _up(state: Path, kafka_port: int | None, zookeeper_port: int | None) -> int:
    running = _read_state(state)
    if running is not None and _alive(running["pid"]):
        print(
            f"aio-cluster-local: already up (pid {running['pid']}, Kafka {running['bootstrap']}); "
            "stop it with: python -m aio_cluster.local down",
            file=sys.stderr,
        )
        return 1
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    cluster = LocalCluster(kafka_port=kafka_port, zookeeper_port=zookeeper_port, use_env=False)
    try:
        async with cluster:
            data_dir = cluster._data_dir
            _write_state(
                state,
                {
                    "pid": os.getpid(),
                    "bootstrap": cluster.bootstrap,
                    "zookeeper": cluster.zookeeper,
                    "data_dir": None if data_dir is None else str(data_dir),
                },
            )
            print(f"export {_BOOTSTRAP_VAR}={cluster.bootstrap}")
            print(f"export {_ZOOKEEPER_VAR}={cluster.zookeeper}", flush=True)
            await asyncio.Event().wait()  # until a signal cancels this task
    except asyncio.CancelledError:
        pass  # Ctrl-C, SIGTERM or `down`: the cluster has stopped
    finally:
        _forget_state(state)  # last: once the file is gone, `down` knows the cluster stopped
    return 0


def _down(state: Path) -> int:
    running = _read_state(state)
    if running is None or not _alive(running["pid"]):
        if running is not None:  # the `up` was killed: what it left behind goes now
            if running.get("data_dir"):
                shutil.rmtree(running["data_dir"], ignore_errors=True)
            state.unlink(missing_ok=True)
        print("aio-cluster-local: nothing running", file=sys.stderr)
        return 1
    pid = running["pid"]
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 2 * _STOP_GRACE + 30
    while state.exists() and _alive(pid):
        if time.monotonic() > deadline:
            print(f"aio-cluster-local: pid {pid} did not stop in time", file=sys.stderr)
            return 1
        time.sleep(0.1)
    state.unlink(missing_ok=True)
    print(f"aio-cluster-local: stopped Kafka {running['bootstrap']}", file=sys.stderr)
    return 0


def _read_state(path: Path) -> dict[str, Any] | None:
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and isinstance(state.get("pid"), int) else None


def _write_state(path: Path, state: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(state))
    partial.replace(path)


def _forget_state(path: Path) -> None:
    """Remove the state file if this process wrote it."""
    running = _read_state(path)
    if running is not None and running["pid"] == os.getpid():
        path.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # gone, or the pid is someone else's now
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
