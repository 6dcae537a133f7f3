"""kazoo's failures, mapped onto the library's error tree at the boundary.

Apart from the client because it is a table, not a conversation: which kazoo exception means
what for the library (a denied ACL, refused credentials, the server's answer to one request, a
lost connection or session, a timeout), and which of them prove that the server heard a request.
The client (`aio_cluster.zookeeper.client`) raises what `translate` gives, the original kept as
``__cause__``.
"""

from __future__ import annotations

from kazoo.exceptions import (
    AuthFailedError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NotEmptyError,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
    ZookeeperError,
)
from kazoo.exceptions import (
    BadVersionError as _KazooBadVersion,
)
from kazoo.exceptions import (
    NodeExistsError as _KazooNodeExists,
)
from kazoo.exceptions import (
    NoNodeError as _KazooNoNode,
)
from kazoo.handlers.threading import KazooTimeoutError

from ..errors import (
    AccessDeniedError,
    AuthenticationError,
    BadVersionError,
    CoordinationError,
    CoordinationTimeout,
    NodeExistsError,
    NoNodeError,
    SessionLostError,
)

__all__ = ["ANSWERS", "translate"]

ANSWERS = (
    _KazooNoNode,
    _KazooNodeExists,
    _KazooBadVersion,
    NotEmptyError,
    NoAuthError,
    RolledBackError,
)
"""Failures that are the server's answer: the server heard the request (see
`aio_cluster.zookeeper.client.ZooKeeper.heard_at`)."""


def translate(exc: BaseException, what: str) -> BaseException:
    """Map a kazoo error onto the library's error tree (the original becomes ``__cause__``)."""
    mapped: BaseException
    if isinstance(exc, NoAuthError):
        mapped = AccessDeniedError(
            f"{what}: not allowed by the node's ACL for this session's credentials"
        )
    elif isinstance(exc, AuthFailedError):
        mapped = AuthenticationError(f"{what}: ZooKeeper refused the session's credentials")
    elif isinstance(exc, _KazooNodeExists):
        mapped = NodeExistsError(f"{what}: node exists")
    elif isinstance(exc, _KazooNoNode):
        mapped = NoNodeError(f"{what}: no node")
    elif isinstance(exc, _KazooBadVersion):
        mapped = BadVersionError(f"{what}: bad version")
    elif isinstance(exc, SessionExpiredError):
        mapped = SessionLostError(f"{what}: the ZooKeeper session expired")
    elif isinstance(exc, (ConnectionLoss, ConnectionClosedError)):
        mapped = CoordinationError(f"{what}: connection to ZooKeeper lost")
    elif isinstance(exc, (OperationTimeoutError, KazooTimeoutError)):
        mapped = CoordinationTimeout(f"{what}: ZooKeeper did not answer in time")
    elif isinstance(exc, NotEmptyError):
        mapped = CoordinationError(f"{what}: node has children")
    elif isinstance(exc, (ZookeeperError, KazooException)):
        mapped = CoordinationError(f"{what}: {type(exc).__name__}: {exc}")
    else:
        return exc
    mapped.__cause__ = exc
    return mapped
