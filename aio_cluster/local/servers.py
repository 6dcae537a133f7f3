"""The servers as JVMs on 127.0.0.1: one ZooKeeper server or an ensemble, one Kafka node or
several (KRaft: each node a broker and a controller, every node a voter of the quorum), each of
them stoppable and restartable on its own port with its own data."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Literal

from ..concurrency import settle
from ..errors import LocalClusterError
from . import acls, config, jars, probes, process
from .class_archive import ClassArchive
from .security import Security

_log = logging.getLogger(__name__)

Service = Literal["zookeeper", "kafka"]
"""The two kinds of server, as the fault hooks name them."""

PROXIED = "PROXIED"
"""The name of a Kafka node's proxied listeners, numbered from 1 (``PROXIED1``, ...)."""


@dataclasses.dataclass(frozen=True)
class Ports:
    """The ports of every node, by node index."""

    kafka: Sequence[int]
    controller: Sequence[int]
    zookeeper: Sequence[int]
    quorum: Sequence[int]  # a ZooKeeper ensemble's follower port; unused by a standalone one
    election: Sequence[int]  # a ZooKeeper ensemble's leader election port; same
    internal: Sequence[int] = ()  # a secured Kafka node's plaintext listener between nodes
    secure: Sequence[int] = ()  # a secured ZooKeeper node's TLS client port
    proxied: Sequence[Sequence[int]] = ()
    """Per set of Kafka proxies, each node's proxied listener (see `KafkaProxies`)."""
    proxies: Sequence[Sequence[int]] = ()
    """Per set of Kafka proxies, the port of each node's proxy, which that listener advertises."""

    @classmethod
    def pick(
        cls,
        brokers: int,
        zookeepers: int,
        kafka_port: int | None,
        zookeeper_port: int | None,
        *,
        secured: bool = False,
        proxy_sets: int = 0,
    ) -> Ports:
        """The ports asked for (one node of each only) and free ones for the rest; a
        ``secured`` cluster has an internal listener per Kafka node and a TLS port per ZooKeeper;
        each of ``proxy_sets`` a proxied listener per Kafka node and a port for its proxy.

        Raises:
            LocalClusterError: a port asked for is taken (checked before anything starts).
        """
        for service, port in (("Kafka", kafka_port), ("ZooKeeper", zookeeper_port)):
            if port is not None:
                probes.check_port_free(port, service)
        ports = probes.free_ports(
            *([kafka_port] * brokers),
            *([zookeeper_port] * zookeepers),
            *([None] * ((2 if secured else 1) * brokers + (3 if secured else 2) * zookeepers)),
            *([None] * (2 * proxy_sets * brokers)),
        )
        extra = (brokers, zookeepers) if secured else (0, 0)
        sizes = (brokers, zookeepers, brokers, zookeepers, zookeepers, *extra)
        cuts = itertools.pairwise(itertools.accumulate(sizes, initial=0))
        kafka, zookeeper, controller, quorum, election, internal, secure = (
            ports[a:b] for a, b in cuts
        )
        rest = ports[sum(sizes) :]
        sets = [rest[start : start + brokers] for start in range(0, len(rest), brokers)]
        return cls(
            *(kafka, controller, zookeeper, quorum, election, internal, secure),
            proxied=sets[:proxy_sets],
            proxies=sets[proxy_sets:],
        )

    @property
    def bootstrap(self) -> str:
        """Every Kafka node's address, comma-separated."""
        return ",".join(f"{config.HOST}:{port}" for port in self.kafka)

    @property
    def connect(self) -> str:
        """Every ZooKeeper node's address, comma-separated."""
        return ",".join(f"{config.HOST}:{port}" for port in self.zookeeper)


class JavaServers:
    """The JVMs of a cluster, their configuration and logs under ``data``.

    One node of each keeps the single-node layout and heap sizes; several nodes get smaller
    heaps (see `aio_cluster.local.process`), so that six JVMs start together on two cores.
    """

    def __init__(
        self,
        java: str,
        data: Path,
        ports: Ports,
        max_session_timeout_ms: int,
        security: Security | None = None,
        racks: Sequence[str] = (),
    ) -> None:
        self._java = java
        self._racks = racks
        self._security = security
        self._data = data
        self._ports = ports
        self._max_session_timeout_ms = max_session_timeout_ms
        self.zookeepers: list[process.Child] = []
        self.brokers: list[process.Child] = []

    async def start(self, cache_dir: Path, deadline: float) -> None:
        """Fetch the jars if needed, configure every node, start them all, and return once each
        one answers and every broker has joined the cluster.

        Raises:
            LocalClusterError: Maven failed, or a server exited early or did not answer in time.
        """
        kafka_jars = await jars.resolve_jars(cache_dir, "kafka")
        zookeeper_jars = await jars.resolve_jars(cache_dir, "zookeeper")
        _log.info(
            "starting ZooKeeper on %s and Kafka on %s (data in %s); each may open %d files: "
            "a broker holds about %d partitions (it keeps one or two files open for each)",
            self._ports.connect,
            self._ports.bootstrap,
            self._data,
            process.open_files_limit(),
            process.partitions_held(),
        )
        self.zookeepers = [
            self._zookeeper(index, zookeeper_jars) for index in range(len(self._ports.zookeeper))
        ]
        cluster_id = config.kafka_cluster_id()
        formats: list[process.Child] = []
        for index in range(len(self._ports.kafka)):
            broker, storage_format = self._kafka(index, kafka_jars, cluster_id)
            self.brokers.append(broker)
            formats.append(storage_format)
        # ZooKeeper boots while Kafka's storage is formatted; then all are awaited.
        for node in self.zookeepers:
            await node.spawn()
        try:
            await _all(functools.partial(f.run, deadline) for f in formats)
        finally:
            await _all(f.stop for f in formats)
        for node in self.brokers:
            await node.spawn()
        nodes = [*self.zookeepers, *self.brokers]
        await _all(functools.partial(node.wait_ready, deadline) for node in nodes)
        if len(self.brokers) > 1:
            await self._wait_registered(deadline)

    async def stop(self) -> None:
        """Stop every JVM; safe to repeat."""
        await _all(node.stop for node in [*self.brokers, *self.zookeepers])

    def nodes(self, service: Service) -> list[process.Child]:
        """The JVMs of ``service``, by node index."""
        return self.zookeepers if service == "zookeeper" else self.brokers

    def node(self, service: Service, index: int) -> process.Child:
        """The JVM of one node of ``service`` (a fault hook stops or starts it alone).

        Raises:
            LocalClusterError: no such node.
        """
        nodes = self.nodes(service)
        if not 0 <= index < len(nodes):
            raise LocalClusterError(
                f"no {service} node {index}: this cluster has {len(nodes)} (0..{len(nodes) - 1})"
            )
        return nodes[index]

    async def stop_all(self, service: Service) -> None:
        """Stop every node of ``service`` together (a fault); the data stays for `start_all`."""
        await _all(node.stop for node in self.nodes(service))

    async def start_all(self, service: Service, deadline: float) -> None:
        """Start every node of ``service`` again on its port with its data, together (an
        ensemble or a quorum needs a majority up before any one answers), and wait until each
        answers."""
        for node in self.nodes(service):
            await node.spawn()
        for node in self.nodes(service):
            await node.wait_ready(deadline)

    def running_broker(self, index: int) -> bool:
        """Whether Kafka node ``index`` runs now."""
        return 0 <= index < len(self.brokers) and self.brokers[index].running

    async def kafka_tool(
        self, cache_dir: Path, main: str, arguments: Sequence[str], deadline: float
    ) -> None:
        """Run one of Kafka's tools (`aio_cluster.local.acls`) against the first running node's
        plaintext listener between nodes (a super user's), for a secured cluster."""
        running = [i for i, node in enumerate(self.brokers) if node.running] or [0]
        bootstrap = f"{config.HOST}:{self._ports.internal[running[0]]}"
        await acls.run_tool(
            self._java,
            cache_dir,
            self._data / "kafka-tools.log",
            bootstrap,
            main,
            arguments,
            deadline,
        )

    def _zookeeper(self, index: int, classpath: Path) -> process.Child:
        ensemble = len(self._ports.zookeeper) > 1
        name = f"ZooKeeper {index}" if ensemble else "ZooKeeper"
        stem = f"zookeeper-{index}" if ensemble else "zookeeper"
        data_dir = self._data / stem
        if ensemble:
            data_dir.mkdir()
            (data_dir / "myid").write_text(f"{index + 1}\n")
        zoo_cfg = self._data / f"{stem}.cfg"
        settings = config.zookeeper_config(
            self._ports.zookeeper[index],
            data_dir,
            self._max_session_timeout_ms,
            list(zip(self._ports.quorum, self._ports.election, strict=True)) if ensemble else (),
        )
        if self._security is not None:
            settings |= self._security.zookeeper_config(self._ports.secure[index])
        config.write_properties(zoo_cfg, settings)
        heap = process.ZOOKEEPER_NODE_HEAP if ensemble else process.ZOOKEEPER_HEAP
        return process.Child(
            name,
            process.java_command(self._java, classpath, heap, process.ZOOKEEPER_MAIN, str(zoo_cfg)),
            self._data / f"{stem}.log",
            functools.partial(
                probes.zookeeper_answers, f"{config.HOST}:{self._ports.zookeeper[index]}"
            ),
            archive=ClassArchive(self._java, classpath, process.ZOOKEEPER_MAIN),
        )

    def _kafka(
        self, index: int, classpath: Path, cluster_id: str
    ) -> tuple[process.Child, process.Child]:
        """A Kafka node and the tool that formats its storage."""
        several = len(self._ports.kafka) > 1
        name = f"Kafka {index}" if several else "Kafka"
        stem = f"kafka-{index}" if several else "kafka"
        server_properties = self._data / f"{stem}.properties"
        voters = {number + 1: port for number, port in enumerate(self._ports.controller)}
        properties = config.kafka_properties(
            listen_host=config.HOST,
            port=self._ports.kafka[index],
            controller_port=self._ports.controller[index],
            log_dir=str(self._data / stem),
            node_id=index + 1,
            voters=voters,
        )
        if self._racks:
            properties |= config.rack_properties(self._racks[index])
        security = self._security
        if security is not None:
            properties |= security.kafka_properties(
                listen_host=config.HOST,
                port=self._ports.kafka[index],
                internal_port=self._ports.internal[index],
                controller_port=self._ports.controller[index],
            )
        for number, (proxied, proxies) in enumerate(
            zip(self._ports.proxied, self._ports.proxies, strict=True), start=1
        ):
            name = f"{PROXIED}{number}"
            properties = config.with_listener(
                properties,
                name,
                port=proxied[index],
                advertised_port=proxies[index],
                protocol="PLAINTEXT" if security is None else security.protocol,
            )
            if security is not None:
                properties |= security.listener_properties(name)
        config.write_properties(server_properties, properties)
        log = self._data / f"{stem}.log"
        heap = process.KAFKA_NODE_HEAP if several else process.KAFKA_HEAP
        node = process.Child(
            name,
            process.java_command(
                self._java, classpath, heap, "kafka.Kafka", str(server_properties)
            ),
            log,
            functools.partial(
                probes.kafka_answers,
                f"{config.HOST}:{self._ports.kafka[index]}",
                options=None if security is None else security.kafka_options,
            ),
            archive=ClassArchive(self._java, classpath, "kafka.Kafka"),
        )
        storage_format = process.Child(
            f"{name}'s storage format",
            process.java_command(
                self._java,
                classpath,
                process.TOOL_FLAGS,
                "kafka.tools.StorageTool",
                "format",
                "--cluster-id",
                cluster_id,
                "--config",
                str(server_properties),
                "--ignore-formatted",
                *([] if security is None else security.format_arguments()),
            ),
            log,
            archive=ClassArchive(self._java, classpath, "kafka.tools.StorageTool"),
        )
        return node, storage_format

    async def _wait_registered(self, deadline: float) -> None:
        """Wait until the cluster's metadata names every broker: until then a topic replicated
        to all of them cannot be created."""
        count = len(self.brokers)
        options = None if self._security is None else self._security.kafka_options
        probe = functools.partial(probes.kafka_answers, brokers=count, options=options)
        if not await probes.wait_answering(probe, self._ports.bootstrap, deadline):
            raise LocalClusterError(f"the {count} Kafka nodes did not all join in time")


async def _all(calls: Iterable[Callable[[], Awaitable[None]]]) -> None:
    """Run all concurrently; once all ended, raise the first failure (if any): a node that fails
    to stop (or start) leaves the others to finish theirs."""
    for result in await settle(calls):
        if isinstance(result, Exception):
            raise result
