"""The values the ZooKeeper client takes and gives: the session's states, a node's stat, and the
steps of a transaction.

Apart from `aio_cluster.zookeeper.client` because they are plain data the rest of the library
builds and matches on (a control store writes a transaction of them, a member follows the
session's states) without speaking to ZooKeeper or importing kazoo. Pure: no I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Check", "Create", "Delete", "Op", "SessionState", "SetData", "Stat"]


class SessionState(enum.Enum):
    """What the client knows of its ZooKeeper session.

    CONNECTED -> SUSPENDED (connection lost; the session may still live, ephemeral nodes may still
    exist) -> CONNECTED (same session) or LOST (the session expired: every ephemeral node is gone;
    the client then opens a new session and reports CONNECTED again). CLOSED is final.
    """

    CONNECTED = "connected"
    SUSPENDED = "suspended"
    LOST = "lost"
    CLOSED = "closed"


@dataclass(frozen=True)
class Stat:
    """The part of a node's stat the library uses."""

    version: int
    czxid: int
    ephemeral_owner: int


@dataclass(frozen=True)
class Check:
    """A transaction step: the node exists at this version."""

    path: str
    version: int


@dataclass(frozen=True)
class Create:
    """A transaction step: create a node, persistent unless ``ephemeral``; with ``sequence``
    ZooKeeper appends a counter to the name."""

    path: str
    data: bytes
    ephemeral: bool = False
    sequence: bool = False


@dataclass(frozen=True)
class SetData:
    """A transaction step: overwrite a node's data (version -1: whatever its version)."""

    path: str
    data: bytes
    version: int = -1


@dataclass(frozen=True)
class Delete:
    """A transaction step: delete a node (version -1: whatever its version)."""

    path: str
    version: int = -1


Op = Check | Create | SetData | Delete
