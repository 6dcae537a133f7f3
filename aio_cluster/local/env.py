"""A running cluster named by the environment, ``AIO_CLUSTER_BOOTSTRAP`` and
``AIO_CLUSTER_ZOOKEEPER``: e.g. the one of the project's ``docker-compose.yml``."""

from __future__ import annotations

import os

from ..errors import ConfigurationError
from ..kafka.options import parse_bootstrap
from ..zookeeper import client as zk

BOOTSTRAP_VAR = "AIO_CLUSTER_BOOTSTRAP"
ZOOKEEPER_VAR = "AIO_CLUSTER_ZOOKEEPER"


def cluster_from_env() -> tuple[str, str] | None:
    """``(bootstrap, zookeeper)`` from the environment, or None when neither variable is set.

    Raises:
        ConfigurationError: only one is set, or one is malformed.
    """
    bootstrap = os.environ.get(BOOTSTRAP_VAR, "").strip()
    zookeeper = os.environ.get(ZOOKEEPER_VAR, "").strip()
    if not bootstrap and not zookeeper:
        return None
    if not bootstrap or not zookeeper:
        have, missing = (
            (BOOTSTRAP_VAR, ZOOKEEPER_VAR) if bootstrap else (ZOOKEEPER_VAR, BOOTSTRAP_VAR)
        )
        raise ConfigurationError(
            f"{have} is set but {missing} is not: set both to use a running cluster, or neither"
        )
    try:
        servers = ",".join(parse_bootstrap(bootstrap))
    except ConfigurationError as exc:
        raise ConfigurationError(f"{BOOTSTRAP_VAR}={bootstrap!r}: {exc}") from exc
    try:
        connect = zk.parse_hosts(zookeeper)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{ZOOKEEPER_VAR}={zookeeper!r}: {exc}") from exc
    return servers, connect
