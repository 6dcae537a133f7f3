"""The Docker fallback where there is no Java: the same two servers as testcontainers."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from . import config

if TYPE_CHECKING:
    from testcontainers.core.container import DockerContainer

ZOOKEEPER_IMAGE = "zookeeper:3.9"
KAFKA_IMAGE = "apache/kafka:4.4.0"


class Containers:
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
            "ZOO_CFG_EXTRA": f"minSessionTimeout={config.MIN_SESSION_TIMEOUT_MS} "
            f"maxSessionTimeout={max_session_timeout_ms}",
        }
        properties = config.kafka_properties(
            listen_host="0.0.0.0",
            port=kafka_port,
            controller_port=9093,
            log_dir="/tmp/kraft-combined-logs",  # the image's own, writable by its user
        )
        # The apache/kafka image configures the broker from KAFKA_* variables: dots become "_".
        kafka_env = {"KAFKA_" + key.upper().replace(".", "_"): v for key, v in properties.items()}
        kafka_env["CLUSTER_ID"] = config.kafka_cluster_id()
        self._containers: list[DockerContainer] = [
            DockerContainer(ZOOKEEPER_IMAGE)
            .with_envs(**zookeeper_env)
            .with_bind_ports(2181, zookeeper_port),
            DockerContainer(KAFKA_IMAGE)
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


def engine_answers() -> bool:
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
