"""The names the operator's tools go by and read: the command's name (also the client id of
their Kafka reads, so that a broker's logs name them), the ``AIO_CLUSTER_*`` environment
variables with the one way to read one, and who the process's writes are by.
"""

from __future__ import annotations

import getpass
import os
import socket

__all__ = [
    "ACL_VAR",
    "AUTH_VAR",
    "BOOTSTRAP_VAR",
    "CAFILE_VAR",
    "CERTFILE_VAR",
    "KEYFILE_VAR",
    "KEY_PASSWORD_VAR",
    "PROG",
    "TLS_VAR",
    "TOKEN_VAR",
    "ZOOKEEPER_VAR",
    "env",
    "operator",
]

PROG = "aio-cluster"
BOOTSTRAP_VAR = "AIO_CLUSTER_BOOTSTRAP"
ZOOKEEPER_VAR = "AIO_CLUSTER_ZOOKEEPER"
AUTH_VAR = "AIO_CLUSTER_ZOOKEEPER_AUTH"
ACL_VAR = "AIO_CLUSTER_ZOOKEEPER_ACL"
TLS_VAR = "AIO_CLUSTER_ZOOKEEPER_TLS"
CAFILE_VAR = "AIO_CLUSTER_ZOOKEEPER_CAFILE"
CERTFILE_VAR = "AIO_CLUSTER_ZOOKEEPER_CERTFILE"
KEYFILE_VAR = "AIO_CLUSTER_ZOOKEEPER_KEYFILE"
KEY_PASSWORD_VAR = "AIO_CLUSTER_ZOOKEEPER_KEYFILE_PASSWORD"
TOKEN_VAR = "AIO_CLUSTER_DASHBOARD_TOKEN"


def env(variable: str) -> str | None:
    """The variable's value, stripped; None where it is unset or blank."""
    return os.environ.get(variable, "").strip() or None


def operator() -> str:
    """Who the command's writes are by: ``user@host`` of the process (``?`` for a user the
    system cannot name)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no login name, no passwd entry: a bare container
        user = "?"
    return f"{user}@{socket.gethostname()}"
