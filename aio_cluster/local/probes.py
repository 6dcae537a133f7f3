"""Ports and readiness: free ports to listen on, and whether a server answers requests yet."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from ..errors import LocalClusterError
from . import config

POLL_INTERVAL = 0.2  # seconds between two probes of a starting server
_METADATA_PROPAGATION = 5.0
"""Seconds a broker may take to hear of a topic just created (well under one, normally)."""
_UNKNOWN_TOPIC = 3  # Kafka's error code UNKNOWN_TOPIC_OR_PARTITION


def check_port_free(port: int, service: str) -> None:
    with socket.socket() as sock:
        # As the servers bind: SO_REUSEADDR lets a port with closed connections in TIME_WAIT be
        # reused, but not one another process listens on.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((config.HOST, port))
        except OSError as exc:
            raise LocalClusterError(
                f"port {port} on {config.HOST}, asked for {service}, is already in use "
                f"({exc.strerror})"
            ) from exc


def free_ports(*wanted: int | None) -> list[int]:
    """Each wanted port, or a free one for each None (held open together, so all differ)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for port in wanted:
            if port is not None:
                ports.append(port)
                continue
            sock = stack.enter_context(socket.socket())
            sock.bind((config.HOST, 0))
            ports.append(sock.getsockname()[1])
        return ports


async def port_open(host: str, port: int, timeout: float) -> bool:
    try:
        with anyio.fail_after(timeout):
            _, writer = await asyncio.open_connection(host, port)
    except OSError:  # TimeoutError is one
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


def attempt_timeout(deadline: float) -> float:
    """The bound on one probe: short, so that an early exit is noticed soon, and within the
    deadline."""
    return max(0.1, min(deadline - asyncio.get_running_loop().time(), 5.0))


def servers(addresses: str) -> list[tuple[str, int]]:
    """``[(host, port)]`` of a validated ``"h1:p1,h2:p2[/chroot]"``."""
    servers = [server.strip().rpartition(":") for server in addresses.partition("/")[0].split(",")]
    return [(host.strip("[]"), int(port)) for host, _, port in servers]


async def wait_answering(
    probe: Callable[[str, float], Awaitable[bool]], address: str, deadline: float
) -> bool:
    """Probe ``address`` until it answers (True) or the deadline passes (False)."""
    loop = asyncio.get_running_loop()
    while not await probe(address, attempt_timeout(deadline)):
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(POLL_INTERVAL)
    return True


async def _four_letter_word(host: str, port: int, word: bytes) -> bytes:
    """A ZooKeeper server's answer to one of its four-letter-word commands."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(word)
        await writer.drain()
        return await reader.read()
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def zookeeper_monitor(connect: str) -> dict[str, str]:
    """The first ZooKeeper server of ``connect``'s ``mntr`` figures, by name
    (``zk_packets_received``, ``zk_num_alive_connections``...); the local cluster allows it.

    Raises:
        LocalClusterError: the server did not answer ``mntr`` (not allowed there).
    """
    host, port = servers(connect)[0]
    text = (await _four_letter_word(host, port, b"mntr")).decode(errors="replace")
    figures = dict(line.split("\t", 1) for line in text.splitlines() if "\t" in line)
    if not figures:
        raise LocalClusterError(f"ZooKeeper at {host}:{port} did not answer mntr: {text[:200]!r}")
    return figures


async def zookeeper_answers(connect: str, timeout: float) -> bool:
    """Whether a ZooKeeper server of ``connect`` serves: ``srvr`` names the version only then."""
    for host, port in servers(connect):
        try:
            with anyio.fail_after(timeout):
                answer = await _four_letter_word(host, port, b"srvr")
            if b"Zookeeper version" in answer:
                return True
        except OSError:  # TimeoutError is one
            continue
    return False


async def kafka_answers(
    bootstrap: str,
    timeout: float,
    brokers: int = 1,
    options: Mapping[str, Any] | None = None,
) -> bool:
    """Whether Kafka answers a metadata request naming at least ``brokers`` brokers (through a
    listener secured with ``options``, when given: so a TLS or SASL setting that fails shows at
    start)."""
    # A plain connection first: aiokafka would log an error for each attempt while Kafka boots.
    for host, port in servers(bootstrap):
        if await port_open(host, port, timeout):
            break
    else:
        return False
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=int(timeout * 1000), **(options or {})
    )
    try:
        with anyio.fail_after(timeout):
            await admin.start()
        with anyio.fail_after(timeout):
            cluster = await admin.describe_cluster()
    except (KafkaError, OSError):  # TimeoutError is an OSError
        return False
    finally:
        await admin.close()
    return len(cluster["brokers"]) >= brokers


async def partition_leader(
    bootstrap: str, topic: str, partition: int, timeout: float
) -> int | None:
    """The node id that leads a partition by the cluster's metadata: -1 while it has none (or no
    broker answered), None while the topic is unknown (to the broker asked, which may not have
    heard of a topic just created).

    Raises:
        LocalClusterError: the topic exists but not the partition.
    """
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout * 1000))
    try:
        with anyio.fail_after(timeout):
            await admin.start()
        with anyio.fail_after(timeout):
            (described,) = await admin.describe_topics([topic])
    except (KafkaError, OSError):  # TimeoutError is an OSError
        return -1
    finally:
        await admin.close()
    if described["error_code"] == _UNKNOWN_TOPIC:
        return None
    for found in described["partitions"]:
        if found["partition"] == partition:
            return int(found["leader"]) if not found["error_code"] else -1
    if described["error_code"]:
        return -1
    raise LocalClusterError(f"topic {topic!r} has no partition {partition}")


async def wait_leader(
    bootstrap: str,
    topic: str,
    partition: int,
    *,
    timeout: float,
    running: Callable[[int], bool],
) -> int:
    """The node (by index, from 0) that leads a partition now; while it has no leader (an
    election), wait for one. A leader the metadata names is taken at its word only when
    ``running`` says so: a node that has not heard of a failover yet may still name a node that
    was stopped.

    Raises:
        LocalClusterError: the partition is unknown, or it had no leader within ``timeout``.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    unknown_until = loop.time() + _METADATA_PROPAGATION
    while True:
        node_id = await partition_leader(bootstrap, topic, partition, attempt_timeout(deadline))
        if node_id is None:
            if loop.time() >= unknown_until:
                raise LocalClusterError(f"topic {topic!r} does not exist")
        elif node_id > 0 and running(node_id - 1):
            return node_id - 1
        if loop.time() >= deadline:
            raise LocalClusterError(
                f"partition {partition} of {topic!r} had no leader for {timeout:g} s"
            )
        await asyncio.sleep(POLL_INTERVAL)
