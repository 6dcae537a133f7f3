"""LocalCluster: the servers' lifecycle, from wherever they come (Java, Docker, the environment).

Its fault hooks are its interface to the tests; what they do is the JVMs' (`servers`: stopping
and starting nodes, running Kafka's tools), the proxy sets' (`proxy_sets`) and the probes'
(`probes`: a partition's leader).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
import secrets
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Literal

from ..errors import ConfigurationError, LocalClusterError
from ..kafka.options import KafkaOptions
from ..zookeeper import client as zk
from ..zookeeper.security import ZooKeeperTLS
from . import acls, config, docker, env, jars, probes, process, servers
from .faults import KafkaProxies
from .proxy_sets import ProxySets
from .security import Security

if TYPE_CHECKING:
    from typing_extensions import Unpack

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
    """A ZooKeeper server and a Kafka node for development and tests, or with ``brokers=3,
    zookeepers=3`` an ensemble and a replicated cluster (Java only).

    Use it as ``async with LocalCluster() as cluster:`` or call `start()` and `stop()`.
    Once started, `bootstrap` and `zookeeper` say where the servers are. The fault
    hooks (`stop_zookeeper()`, `start_kafka()`, `stop_broker()`, ...) need a cluster
    this object started with Java.

    With several Kafka nodes, topics are created with three replicas by default (as many as there
    are nodes, if fewer) and a write needs two in sync (``min.insync.replicas=2``), so one node may
    die without losing an acknowledged message; a producer must ask for ``acks="all"``.

    The broker does not create topics on first use (``auto.create.topics.enable=false``): a test of
    an unknown topic sees it unknown. Create topics with an admin client.

    With ``kafka_proxies``, `kafka_proxies()` puts one client's Kafka traffic through a
    `FaultProxy` per broker; with ``sasl``, `add_user()`, `grant()` and `revoke()` make a second
    user and set what Kafka's authorizer lets it do.
    """

    def __init__(
        self,
        *,
        brokers: int = 1,
        zookeepers: int = 1,
        kafka_port: int | None = None,
        zookeeper_port: int | None = None,
        cache_dir: Path | None = None,
        startup_timeout: float = 90.0,
        max_session_timeout_ms: int = 60000,
        use_env: bool = True,
        tls: bool = False,
        sasl: bool = False,
        kafka_proxies: int = 0,
        racks: Sequence[str] | None = None,
    ) -> None:
        """Configure the cluster; nothing starts before `start()`.

        Args:
            brokers: how many Kafka nodes (each a broker and a KRaft controller).
            zookeepers: how many ZooKeeper servers; several form an ensemble (an odd number
                survives the loss of a minority).
            kafka_port: Kafka's port on 127.0.0.1 (one node only); None picks a free one.
            zookeeper_port: ZooKeeper's port on 127.0.0.1 (one server only); None picks a free
                one.
            cache_dir: where the jars are kept between runs; default ``$AIO_CLUSTER_CACHE`` or
                ``~/.cache/aio-cluster``.
            startup_timeout: seconds the servers have to answer requests after they were started
                (on a loaded 2-core machine Kafka may take tens of seconds).
            max_session_timeout_ms: the longest ZooKeeper session the server grants; the shortest
                is 1000 ms, so that tests of session expiry can use 1-second sessions.
            use_env: use the cluster named by ``AIO_CLUSTER_BOOTSTRAP`` and
                ``AIO_CLUSTER_ZOOKEEPER`` when both are set, instead of starting one (the ports
                asked for are then ignored). A cluster with ``tls`` or ``sasl`` never comes from
                the environment.
            tls: Kafka serves TLS only, with a certificate for 127.0.0.1 signed by a CA made at
                start, and ZooKeeper serves TLS too, on `zookeeper_secure` (its plain port
                stays); `kafka_options` trusts the CA. Needs Java and trustme.
            sasl: Kafka serves SASL SCRAM-SHA-512 over TLS (implies ``tls``), with a user made
                at start whose name and random password are in `kafka_options`.
            kafka_proxies: how many clients at once may send their Kafka traffic through
                `kafka_proxies()` (``True``: one): each gets a listener on every broker, ports
                fixed at start. Only a cluster this object starts with Java has them; the
                environment's cluster is still used when named (without them).
            racks: each broker's rack (``broker.rack``), one per broker, with the rack-aware
                replica selector, so that a member given a rack reads from the replica there.
                Needs Java; a cluster in racks never comes from the environment.

        Raises:
            ConfigurationError: fewer than one node, a port outside 1..65535 or asked for with
                several nodes, both ports equal, a non-positive timeout, a session bound below
                1000 ms, or a negative ``kafka_proxies``.
        """
        for name, count, port_name, port in (
            ("brokers", brokers, "kafka_port", kafka_port),
            ("zookeepers", zookeepers, "zookeeper_port", zookeeper_port),
        ):
            if count < 1:
                raise ConfigurationError(f"{name}={count}: a cluster needs at least one")
            if count > 1 and port is not None:
                raise ConfigurationError(
                    f"{port_name} names one port; with {name}={count} free ports are picked"
                )
        for name, port in (("kafka_port", kafka_port), ("zookeeper_port", zookeeper_port)):
            if port is not None and not 0 < port < 65536:
                raise ConfigurationError(f"{name}={port} is not a TCP port (1..65535)")
        if kafka_port is not None and kafka_port == zookeeper_port:
            raise ConfigurationError(f"kafka_port and zookeeper_port are both {kafka_port}")
        named: list[object] = [] if racks is None or isinstance(racks, str) else list(racks)
        if racks is not None and (
            len(named) != brokers
            or not all(isinstance(rack, str) and rack.strip() == rack and rack for rack in named)
        ):
            raise ConfigurationError(
                f"racks={racks!r} must name one rack (a non-empty string without surrounding "
                f"spaces) for each of {brokers} brokers"
            )
        if kafka_proxies < 0:
            raise ConfigurationError(
                f"kafka_proxies={kafka_proxies!r} must be a count of clients (0 or more)"
            )
        if startup_timeout <= 0:
            raise ConfigurationError(f"startup_timeout={startup_timeout} must be positive")
        if max_session_timeout_ms < config.MIN_SESSION_TIMEOUT_MS:
            raise ConfigurationError(
                f"max_session_timeout_ms={max_session_timeout_ms} is below the minimum session "
                f"timeout of {config.MIN_SESSION_TIMEOUT_MS} ms"
            )
        self._brokers = brokers
        self._zookeepers = zookeepers
        self._kafka_port = kafka_port
        self._zookeeper_port = zookeeper_port
        self._cache_dir = cache_dir if cache_dir is not None else jars.default_cache_dir()
        self._startup_timeout = startup_timeout
        self._max_session_timeout_ms = max_session_timeout_ms
        self._racks = tuple(racks or ())
        self._use_env = use_env and not (tls or sasl or racks)
        self._secured = tls or sasl
        self._sasl = sasl
        self._security: Security | None = None
        self._zookeeper_secure = ""
        self._state = State.NEW
        self._mode: Mode | None = None
        self._bootstrap = ""
        self._zookeeper = ""
        self._data_dir: Path | None = None
        self._servers: servers.JavaServers | None = None
        self._containers: docker.Containers | None = None
        self._proxy_sets = int(kafka_proxies)
        self._proxies: ProxySets | None = None

    @property
    def bootstrap(self) -> str:
        """Kafka's bootstrap servers, ``"127.0.0.1:PORT"`` (comma-separated, every node, with
        several), or as the environment named them."""
        self._require_running()
        return self._bootstrap

    @property
    def zookeeper(self) -> str:
        """ZooKeeper's connect string, ``"127.0.0.1:PORT"`` (comma-separated, every server, with
        an ensemble), or as the environment named it."""
        self._require_running()
        return self._zookeeper

    @property
    def kafka_options(self) -> KafkaOptions:
        """Connection options for a Kafka client of this cluster, ready for ``ConsumerGroup(...,
        kafka_options=)`` or ``AIOKafkaAdminClient(**options)``: empty for a plaintext cluster;
        with ``tls`` an ``ssl.SSLContext`` trusting the cluster's CA; with ``sasl`` also the
        SCRAM user (its repr hides the password)."""
        self._require_running()
        return KafkaOptions() if self._security is None else self._security.kafka_options

    @property
    def ca_file(self) -> Path:
        """The PEM certificate of the CA behind the cluster's TLS (``--ssl-cafile`` for the
        command line).

        Raises:
            LocalClusterError: the cluster was not started with ``tls`` or ``sasl``.
        """
        return self._security_or("a CA exists only in a LocalCluster(tls=True)").ca_file

    @property
    def zookeeper_secure(self) -> str:
        """ZooKeeper's TLS connect string, ``"127.0.0.1:PORT"`` (a cluster with ``tls``).

        Raises:
            LocalClusterError: the cluster was not started with ``tls`` or ``sasl``.
        """
        self._require_running()
        if not self._zookeeper_secure:
            raise LocalClusterError("ZooKeeper serves TLS only in a LocalCluster(tls=True)")
        return self._zookeeper_secure

    @property
    def zookeeper_tls(self) -> ZooKeeperTLS:
        """How to speak TLS to `zookeeper_secure`: trusting the cluster's CA.

        Raises:
            LocalClusterError: the cluster was not started with ``tls`` or ``sasl``.
        """
        return self._security_or(
            "ZooKeeper serves TLS only in a LocalCluster(tls=True)"
        ).zookeeper_tls

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
        """Stop ZooKeeper, every server of it (a fault for tests); the data stays for
        `start_zookeeper()`.

        Raises:
            LocalClusterError: this object did not start the cluster with Java.
        """
        await self._java("zookeeper").stop_all("zookeeper")

    async def start_zookeeper(self) -> None:
        """Start ZooKeeper (every server) again on the same ports with the same data, and wait
        until it answers.

        Raises:
            LocalClusterError: this object did not start the cluster with Java, or ZooKeeper did
                not answer within ``startup_timeout``.
        """
        await self._java("zookeeper").start_all("zookeeper", self._deadline())

    async def stop_kafka(self) -> None:
        """Stop Kafka, every node of it (a fault for tests); the data stays for
        `start_kafka()`.

        Raises:
            LocalClusterError: this object did not start the cluster with Java.
        """
        await self._java("kafka").stop_all("kafka")

    async def start_kafka(self) -> None:
        """Start Kafka (every node) again on the same ports with the same data, and wait until
        it answers.

        Raises:
            LocalClusterError: this object did not start the cluster with Java, or Kafka did not
                answer within ``startup_timeout``.
        """
        await self._java("kafka").start_all("kafka", self._deadline())

    async def stop_broker(self, index: int) -> None:
        """Stop one Kafka node (a fault for tests): the partitions it led get new leaders among
        the replicas in sync. Its data stays for `start_broker()`.

        Args:
            index: the node, from 0 (its Kafka node id is ``index + 1``).

        Raises:
            LocalClusterError: no such node, or this object did not start the cluster with Java.
        """
        await self._node("kafka", index).stop()

    async def start_broker(self, index: int) -> None:
        """Start one Kafka node again on its port with its data, and wait until it answers.

        Raises:
            LocalClusterError: no such node, this object did not start the cluster with Java, or
                the node did not answer within ``startup_timeout``.
        """
        await self._node("kafka", index).start(self._deadline())

    async def stop_zookeeper_node(self, index: int) -> None:
        """Stop one ZooKeeper server (a fault for tests): its clients move to another server;
        with a majority stopped the ensemble serves nobody. Its data stays for
        `start_zookeeper_node()`.

        Args:
            index: the server, from 0 (its ZooKeeper server id is ``index + 1``).

        Raises:
            LocalClusterError: no such server, or this object did not start the cluster with
                Java.
        """
        await self._node("zookeeper", index).stop()

    async def start_zookeeper_node(self, index: int) -> None:
        """Start one ZooKeeper server again on its port with its data, and wait until it
        serves (in an ensemble: until it is part of a quorum again).

        Raises:
            LocalClusterError: no such server, this object did not start the cluster with Java,
                or the server did not serve within ``startup_timeout``.
        """
        await self._node("zookeeper", index).start(self._deadline())

    async def leader(self, topic: str, partition: int) -> int:
        """The Kafka node that leads a partition now, as the index `stop_broker()` takes;
        while the partition has no leader (an election), wait for one.

        Raises:
            LocalClusterError: the cluster is not running, the partition is unknown, or it had
                no leader within ``startup_timeout``.
        """
        self._require_running()
        java = self._servers
        return await probes.wait_leader(
            self._bootstrap,
            topic,
            partition,
            timeout=self._startup_timeout,
            running=lambda index: java is None or java.running_broker(index),
        )

    async def add_user(self, name: str, password: str | None = None) -> KafkaOptions:
        """Create a SCRAM user of a ``sasl`` cluster (or give one a new password), allowed
        nothing until `grant()`: the authorizer lets only the cluster's own user (that of
        `kafka_options`) do anything without ACLs.

        Args:
            name: the user name: letters, digits and ``._@-``.
            password: its password, of the same characters; None makes a random one.

        Returns:
            The connection options of that user: `kafka_options` with its name and password,
            once the brokers let it in.

        Raises:
            ConfigurationError: the name or password holds other characters.
            LocalClusterError: the cluster was not started by this object with ``sasl=True``,
                Kafka's tool failed (the message quotes its output), or the brokers did not let
                the user in within ``startup_timeout``.
        """
        password = secrets.token_urlsafe(24) if password is None else password
        arguments = acls.user_arguments(name, password)
        deadline = self._deadline()
        await self._kafka_tool(acls.CONFIGS, arguments)
        options = KafkaOptions(
            {**self.kafka_options, "sasl_plain_username": name, "sasl_plain_password": password}
        )
        # The brokers learn the credential from the metadata log a moment later: until then they
        # refuse the user, which a test would take for the failure it looks for.
        probe = functools.partial(probes.kafka_answers, options=options)
        if not await probes.wait_answering(probe, self._bootstrap, deadline):
            raise LocalClusterError(f"Kafka refused the new user {name!r} for too long")
        return options

    async def grant(
        self, user: str, *operations: str, **resources: Unpack[acls.AclResources]
    ) -> None:
        """Allow a user of a ``sasl`` cluster ``operations`` on each resource named, e.g.
        ``grant("reader", "Read", topic=t)``, ``grant("reader", "Read", "Describe", group=g)``,
        ``grant("reader", "Describe", cluster=True)``, or for exactly once ``grant("reader",
        "Write", "Describe", transactional_id="aio-cluster.", prefixed=True)``. The brokers
        apply it a moment after the call returns (from the metadata log).

        Args:
            user: the user's name (see `add_user()`).
            *operations: Kafka's operation names: ``Read``, ``Write``, ``Describe``, ...
            **resources: the resources (`AclResources`): ``topic``, ``group``,
                ``transactional_id``, ``cluster`` and whether they are ``prefixed``.

        Raises:
            ConfigurationError: no operation or resource, or an operation a resource named does
                not have (``Read`` on the cluster, ``Write`` on a group, ...).
            LocalClusterError: the cluster was not started by this object with ``sasl=True``, or
                Kafka's tool failed (the message quotes the end of its output).
        """
        await self._acl(user, operations, resources, add=True)

    async def revoke(
        self, user: str, *operations: str, **resources: Unpack[acls.AclResources]
    ) -> None:
        """Take back what `grant()` allowed, named the same way (its arguments, its errors);
        the brokers refuse the user a moment after the call returns."""
        await self._acl(user, operations, resources, add=False)

    async def _acl(
        self,
        user: str,
        operations: Sequence[str],
        resources: acls.AclResources,
        *,
        add: bool,
    ) -> None:
        """Add (``add``) or remove the ACLs `grant()` and `revoke()` name."""
        await self._kafka_tool(
            acls.ACLS, acls.acl_arguments(user, operations, add=add, **resources)
        )

    async def _kafka_tool(self, main: str, arguments: Sequence[str]) -> None:
        """Run one of Kafka's tools against the first running node's plaintext listener between
        nodes (a super user's), for a ``sasl`` cluster this object started."""
        self._require_running()
        if not self._sasl:
            raise LocalClusterError("users and ACLs need a LocalCluster(sasl=True)")
        await self._java("kafka").kafka_tool(self._cache_dir, main, arguments, self._deadline())

    @contextlib.asynccontextmanager
    async def kafka_proxies(self) -> AsyncIterator[KafkaProxies]:
        """One client's Kafka traffic through a proxy per broker, for the block: give a member
        ``proxies.bootstrap`` instead of `bootstrap` (and the same `kafka_options`), then
        ``proxies.drop()`` cuts it off from all of Kafka, ``proxies[i].drop()`` from broker
        ``i`` alone, and ``proxies.forward()`` heals; other clients are untouched, and so is
        the member's ZooKeeper traffic.

        Each block takes one of the ``kafka_proxies`` sets of listeners the cluster was started
        with (a listener per broker that advertises its proxy's address, so the client learns
        only proxies from the metadata) and gives it back at its end, the proxies stopped.

        Raises:
            LocalClusterError: the cluster is not running, was not started by this object with
                Java and ``kafka_proxies``, every set is in use, or a proxy's port was taken
                meanwhile.
        """
        self._require_running()
        if self._servers is None or self._proxies is None:
            raise LocalClusterError(
                f"Kafka proxies need a cluster this LocalCluster started with Java; this one "
                f"came from {self._mode}"
            )
        async with self._proxies.lend() as proxies:
            yield proxies

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

    def _security_or(self, refusal: str) -> Security:
        """The running cluster's TLS and SASL settings; ``refusal`` is the error without them."""
        self._require_running()
        if self._security is None:
            raise LocalClusterError(refusal)
        return self._security

    def _java(self, service: servers.Service) -> servers.JavaServers:
        self._require_running()
        if self._servers is None:
            raise LocalClusterError(
                f"stopping and starting {service} needs a cluster this LocalCluster started with "
                f"Java; this one came from {self._mode}"
            )
        return self._servers

    def _node(self, service: servers.Service, index: int) -> process.Child:
        return self._java(service).node(service, index)

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
        kafka, zookeeper = self._brokers, self._zookeepers
        layout = servers.Ports.pick(
            kafka,
            zookeeper,
            self._kafka_port,
            self._zookeeper_port,
            secured=self._secured,
            proxy_sets=self._proxy_sets,
        )
        self._proxies = ProxySets(layout)
        self._bootstrap = layout.bootstrap
        self._zookeeper = layout.connect
        java = process.find_java()
        if java is not None:
            self._mode = "java"
            self._data_dir = Path(tempfile.mkdtemp(prefix="aio-cluster-"))
            if self._secured:
                self._security = Security.create(self._data_dir / "tls", sasl=self._sasl)
                self._zookeeper_secure = ",".join(f"{config.HOST}:{port}" for port in layout.secure)
            self._servers = servers.JavaServers(
                java,
                self._data_dir,
                layout,
                self._max_session_timeout_ms,
                self._security,
                self._racks,
            )
            await self._servers.start(self._cache_dir, self._deadline())
        elif self._secured or self._racks:
            raise LocalClusterError(
                "LocalCluster(tls=True), (sasl=True) or (racks=...) needs Java 17 or newer"
            )
        elif kafka > 1 or zookeeper > 1:
            raise LocalClusterError(
                f"a cluster of {kafka} Kafka and {zookeeper} ZooKeeper nodes needs Java 17 or "
                "newer ($JAVA_HOME/bin/java or java on PATH), and none was found"
            )
        elif await asyncio.to_thread(docker.engine_answers):
            self._mode = "docker"
            await self._start_docker(layout.kafka[0], layout.zookeeper[0])
        else:
            raise LocalClusterError(
                "the local cluster needs Java 17 or newer ($JAVA_HOME/bin/java or java on PATH) "
                "or a Docker engine (with testcontainers installed), and neither was found; or "
                f"set {env.BOOTSTRAP_VAR} and {env.ZOOKEEPER_VAR} to use a running cluster"
            )

    async def _start_docker(self, kafka_port: int, zookeeper_port: int) -> None:
        _log.info("no Java found: starting ZooKeeper and Kafka in Docker")
        self._containers = docker.Containers(
            kafka_port, zookeeper_port, self._max_session_timeout_ms
        )
        await asyncio.to_thread(self._containers.start)
        await self._wait_external(self._deadline())

    async def _wait_external(self, deadline: float) -> None:
        """Wait until servers this object does not run as its children answer."""
        for name, probe, address in (
            ("ZooKeeper", probes.zookeeper_answers, self._zookeeper),
            ("Kafka", probes.kafka_answers, self._bootstrap),
        ):
            if not await probes.wait_answering(probe, address, deadline):
                raise LocalClusterError(
                    f"{name} at {address} did not answer within {self._startup_timeout:g} s"
                )

    async def _release(self) -> None:
        """Stop whatever was started and remove the data; safe to repeat."""
        if self._servers is not None:
            await self._servers.stop()
        if self._containers is not None:
            await asyncio.to_thread(self._containers.stop)
        if self._data_dir is not None:
            shutil.rmtree(self._data_dir, ignore_errors=True)
        if self._servers is not None or self._containers is not None:
            _log.info("local cluster stopped")
