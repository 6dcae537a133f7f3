"""The servers' configuration: ZooKeeper's ``zoo.cfg`` and Kafka's ``server.properties``, as
dictionaries written to files, and where the jars' pom and the shared log4j2 configuration live."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

HOST = "127.0.0.1"  # never "localhost": it may resolve to ::1, where nothing listens
MIN_SESSION_TIMEOUT_MS = 1000
JARS = Path(__file__).resolve().parent.parent / "jars"  # the pom and log4j2.yaml


def zookeeper_config(port: int, data_dir: Path, max_session_timeout_ms: int) -> dict[str, str]:
    return {
        "tickTime": "500",
        "minSessionTimeout": str(MIN_SESSION_TIMEOUT_MS),
        "maxSessionTimeout": str(max_session_timeout_ms),
        "dataDir": str(data_dir),
        "clientPort": str(port),
        "clientPortAddress": HOST,
        "admin.enableServer": "false",
        "4lw.commands.whitelist": "srvr,ruok,stat,cons",
        "maxClientCnxns": "0",  # the default of 60 per address is low for a test suite on one host
        "forceSync": "no",  # written data survives the process, not the machine: enough here
    }


def kafka_properties(
    *, listen_host: str, port: int, controller_port: int, log_dir: str
) -> dict[str, str]:
    return {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{HOST}:{controller_port}",
        "listeners": f"PLAINTEXT://{listen_host}:{port},CONTROLLER://{HOST}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{port}",
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


def write_properties(path: Path, properties: dict[str, str]) -> None:
    path.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))


def kafka_cluster_id() -> str:
    """A random cluster id as Kafka writes them: 22 characters of URL-safe base64, not starting
    with "-" (which the storage tool would take for an option)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id
