"""LocalCluster: the servers' lifecycle, from wherever they come (Java, Docker, the environment)."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import Literal

from .. import zk
from ..errors import ConfigurationError, LocalClusterError
from . import config, docker, env, jars, probes, process

_log = logging.getLogger(__name__)

Mode = Literal["java", "docker", "environment"]


class State(enum.Enum):
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
        if max_session_timeout_ms < config.MIN_SESSION_TIMEOUT_MS:
            raise ConfigurationError(
                f"max_session_timeout_ms={max_session_timeout_ms} is below the minimum session "
                f"timeout of {config.MIN_SESSION_TIMEOUT_MS} ms"
            )
        self._kafka_port = kafka_port
        self._zookeeper_port = zookeeper_port
        self._cache_dir = cache_dir if cache_dir is not None else jars.default_cache_dir()
        self._startup_timeout = startup_timeout
        self._max_session_timeout_ms = max_session_timeout_ms
        self._use_env = use_env
        self._state = State.NEW
        self._mode: Mode | None = None
        self._bootstrap = ""
        self._zookeeper = ""
        self._data_dir: Path | None = None
        self._zookeeper_jvm: process.Child | None = None
        self._kafka_jvm: process.Child | None = None
        self._containers: docker.Containers | None = None

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
        if self._state is State.RUNNING:
            return
        if self._state is not State.NEW:
            raise LocalClusterError(f"this LocalCluster is {self._state.value}; make a new one")
        self._state = State.STARTING
        began = time.monotonic()
        try:
            await self._start()
        except BaseException:
            await process.shielded(self._release())
            self._state = State.STOPPED
            raise
        self._state = State.RUNNING
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
        if self._state is State.STOPPED:
            return
        await process.shielded(self._release())
        self._state = State.STOPPED

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
        if self._state is not State.RUNNING:
            raise LocalClusterError(f"the local cluster is {self._state.value}, not running")

    def _jvm(self, service: Literal["zookeeper", "kafka"]) -> process.Child:
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
        if self._use_env and (found := env.cluster_from_env()) is not None:
            self._mode = "environment"
            self._bootstrap, self._zookeeper = found
            await self._wait_external(self._deadline())
            return
        # Ports first: a port asked for and taken fails at once, before Maven or a JVM runs.
        for service, port in (("Kafka", self._kafka_port), ("ZooKeeper", self._zookeeper_port)):
            if port is not None:
                probes.check_port_free(port, service)
        kafka_port, zookeeper_port, controller_port = probes.free_ports(
            self._kafka_port, self._zookeeper_port, None
        )
        self._bootstrap = f"{config.HOST}:{kafka_port}"
        self._zookeeper = f"{config.HOST}:{zookeeper_port}"
        java = process.find_java()
        if java is not None:
            self._mode = "java"
            await self._start_java(java, kafka_port, zookeeper_port, controller_port)
        elif await asyncio.to_thread(docker.engine_answers):
            self._mode = "docker"
            await self._start_docker(kafka_port, zookeeper_port)
        else:
            raise LocalClusterError(
                "the local cluster needs Java 17 or newer ($JAVA_HOME/bin/java or java on PATH) "
                "or a Docker engine (with testcontainers installed), and neither was found; or "
                f"set {env.BOOTSTRAP_VAR} and {env.ZOOKEEPER_VAR} to use a running cluster"
            )

    async def _start_java(
        self, java: str, kafka_port: int, zookeeper_port: int, controller_port: int
    ) -> None:
        kafka_jars = await jars.resolve_jars(self._cache_dir, "kafka")
        zookeeper_jars = await jars.resolve_jars(self._cache_dir, "zookeeper")
        self._data_dir = data = Path(tempfile.mkdtemp(prefix="aio-cluster-"))
        _log.info(
            "starting ZooKeeper on %s and Kafka on %s (data in %s)",
            self._zookeeper,
            self._bootstrap,
            data,
        )
        zoo_cfg = data / "zoo.cfg"
        config.write_properties(
            zoo_cfg,
            config.zookeeper_config(
                zookeeper_port, data / "zookeeper", self._max_session_timeout_ms
            ),
        )
        server_properties = data / "server.properties"
        config.write_properties(
            server_properties,
            config.kafka_properties(
                listen_host=config.HOST,
                port=kafka_port,
                controller_port=controller_port,
                log_dir=str(data / "kafka"),
            ),
        )
        zookeeper_log, kafka_log = data / "zookeeper.log", data / "kafka.log"
        self._zookeeper_jvm = process.Child(
            "ZooKeeper",
            process.java_command(
                java, zookeeper_jars, process.ZOOKEEPER_HEAP, process.ZOOKEEPER_MAIN, str(zoo_cfg)
            ),
            zookeeper_log,
            functools.partial(probes.zookeeper_answers, self._zookeeper),
        )
        self._kafka_jvm = process.Child(
            "Kafka",
            process.java_command(
                java, kafka_jars, process.KAFKA_HEAP, "kafka.Kafka", str(server_properties)
            ),
            kafka_log,
            functools.partial(probes.kafka_answers, self._bootstrap),
        )
        storage_format = process.Child(
            "Kafka's storage format",
            process.java_command(
                java,
                kafka_jars,
                process.TOOL_FLAGS,
                "kafka.tools.StorageTool",
                "format",
                "--cluster-id",
                config.kafka_cluster_id(),
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
        self._containers = docker.Containers(
            kafka_port, zookeeper_port, self._max_session_timeout_ms
        )
        await asyncio.to_thread(self._containers.start)
        await self._wait_external(self._deadline())

    async def _wait_external(self, deadline: float) -> None:
        """Wait until servers this object does not run as its children answer."""
        loop = asyncio.get_running_loop()
        for name, probe, address in (
            ("ZooKeeper", probes.zookeeper_answers, self._zookeeper),
            ("Kafka", probes.kafka_answers, self._bootstrap),
        ):
            while not await probe(address, probes.attempt_timeout(deadline)):
                if loop.time() >= deadline:
                    raise LocalClusterError(
                        f"{name} at {address} did not answer within {self._startup_timeout:g} s"
                    )
                await asyncio.sleep(probes.POLL_INTERVAL)

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
