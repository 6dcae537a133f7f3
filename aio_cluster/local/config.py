"""The servers' configuration: ZooKeeper's ``zoo.cfg`` and Kafka's ``server.properties``, as
dictionaries written to files, and where the jars' pom and the shared log4j2 configuration live."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

HOST = "127.0.0.1"  # never "localhost": it may resolve to ::1, where nothing listens
MIN_SESSION_TIMEOUT_MS = 1000
JARS = Path(__file__).resolve().parent.parent / "jars"  # the pom and log4j2.yaml


def zookeeper_config(
    port: int,
    data_dir: Path,
    max_session_timeout_ms: int,
    ensemble: Sequence[tuple[int, int]] = (),
) -> dict[str, str]:
    """A ZooKeeper node's ``zoo.cfg``.

    Args:
        port: the client port.
        data_dir: where the node keeps its snapshots and log (and, in an ensemble, its ``myid``).
        max_session_timeout_ms: the longest session the node grants.
        ensemble: for each node of an ensemble (server id = index + 1) its quorum and election
            ports; empty for a standalone server.
    """
    settings = {
        "tickTime": "500",
        "minSessionTimeout": str(MIN_SESSION_TIMEOUT_MS),
        "maxSessionTimeout": str(max_session_timeout_ms),
        "dataDir": str(data_dir),
        "clientPort": str(port),
        "clientPortAddress": HOST,
        "admin.enableServer": "false",
        # wchc and dump: a session's watches and ephemerals, which the soak samples (tests/soak/).
        "4lw.commands.whitelist": "srvr,ruok,stat,cons,mntr,wchc,dump",
        "maxClientCnxns": "0",  # the default of 60 per address is low for a test suite on one host
        "forceSync": "no",  # written data survives the process, not the machine: enough here
    }
    if ensemble:
        # In ticks: 5 s for a follower to sync with a new leader, 2.5 s of silence before a
        # follower is dropped (and a dead leader noticed).
        settings |= {"initLimit": "10", "syncLimit": "5"}
        for index, (quorum_port, election_port) in enumerate(ensemble):
            settings[f"server.{index + 1}"] = f"{HOST}:{quorum_port}:{election_port}"
    return settings


def kafka_properties(
    *,
    listen_host: str,
    port: int,
    controller_port: int,
    log_dir: str,
    node_id: int = 1,
    voters: Mapping[int, int] | None = None,
) -> dict[str, str]:
    """A Kafka node's ``server.properties``: broker and KRaft controller in one process.

    Args:
        listen_host: the address the client listener binds.
        port: the client port (advertised on 127.0.0.1).
        controller_port: this node's controller port.
        log_dir: where the node keeps its data.
        node_id: this node's id.
        voters: every controller's node id and port; None for a single node (this one). With
            several, topics are replicated to three nodes (fewer if there are fewer) by default
            and a write needs two in sync, so that one node may die without losing a message.
    """
    voters = {node_id: controller_port} if voters is None else voters
    replicas = min(len(voters), 3)
    in_sync = min(replicas, 2)
    return {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": ",".join(
            f"{voter}@{HOST}:{voter_port}" for voter, voter_port in sorted(voters.items())
        ),
        "listeners": f"PLAINTEXT://{listen_host}:{port},CONTROLLER://{HOST}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": log_dir,
        "auto.create.topics.enable": "false",  # an unknown topic stays unknown, as tests expect
        "num.partitions": "1",
        "default.replication.factor": str(replicas),
        "min.insync.replicas": str(in_sync),
        "offsets.topic.replication.factor": str(replicas),
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": str(replicas),
        "transaction.state.log.min.isr": str(in_sync),
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": str(replicas),
        "share.coordinator.state.topic.min.isr": str(in_sync),
        "share.coordinator.state.topic.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
        "num.network.threads": "2",
        "num.io.threads": "2",
        "background.threads": "2",
        "log.cleaner.dedupe.buffer.size": "2097152",  # 128 MiB by default, allocated at start
    }


def with_listener(
    properties: Mapping[str, str], name: str, *, port: int, advertised_port: int, protocol: str
) -> dict[str, str]:
    """A Kafka node's ``properties`` with one more client listener: on ``port``, advertising
    ``advertised_port`` (where a proxy in front of it listens), so that a client bootstrapping
    there learns only such addresses of every node.

    Args:
        properties: the node's settings, with its listeners already.
        name: the listener's name (the same on every node: a client's metadata comes from it).
        port: the port the node binds for it on 127.0.0.1.
        advertised_port: the port on 127.0.0.1 the node tells the listener's clients.
        protocol: its security protocol, that of the node's client listener.
    """
    return {
        **properties,
        "listeners": f"{properties['listeners']},{name}://{HOST}:{port}",
        "advertised.listeners": (
            f"{properties['advertised.listeners']},{name}://{HOST}:{advertised_port}"
        ),
        "listener.security.protocol.map": (
            f"{properties['listener.security.protocol.map']},{name}:{protocol}"
        ),
    }


RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
"""The broker's replica selector that names a consumer's replica in the consumer's rack."""


def rack_properties(rack: str) -> dict[str, str]:
    """A broker's settings for ``rack``: its own rack, and a replica selector that sends a
    consumer giving its rack to the replica there (Kafka's KIP-392)."""
    return {"broker.rack": rack, "replica.selector.class": RACK_AWARE_SELECTOR}


def write_properties(path: Path, properties: dict[str, str]) -> None:
    path.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))


def kafka_cluster_id() -> str:
    """A random cluster id as Kafka writes them: 22 characters of URL-safe base64, not starting
    with "-" (which the storage tool would take for an option)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id
