"""The typed values each subcommand of the ``aio-cluster`` command takes: one frozen dataclass
per subcommand, a field per option. Each option is declared once, in `aio_cluster.cli.flags`,
with the field it fills; these classes only say which fields, of which types, each subcommand's
function receives.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..assign.strategies import Strategy
from ..kafka.fetcher import IsolationLevel
from ..local.cli import LocalOptions
from ..operator.connection import Connection
from ..operator.health import Thresholds
from ..operator.operate import PauseAction
from ..operator.plans import ResetTarget

__all__ = [
    "CheckOptions",
    "ConsumeOptions",
    "DashboardOptions",
    "DescribeOptions",
    "Invocation",
    "ListOptions",
    "PauseOptions",
    "ResetOptions",
    "ServerOptions",
    "SkipOptions",
]


@dataclass(frozen=True, slots=True)
class ListOptions:
    """``list``: ``--json``."""

    json: bool


@dataclass(frozen=True, slots=True)
class _OfTopics:
    """A subcommand's group, and the topics named (``--topic``): empty means every topic of
    the group's."""

    group: str
    topics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DescribeOptions(_OfTopics):
    """``describe GROUP``: ``interval`` is the seconds between two looks of ``--watch``."""

    members: bool
    json: bool
    watch: bool
    interval: float


@dataclass(frozen=True, slots=True)
class CheckOptions(_OfTopics):
    """``check GROUP``: ``samples`` (at least 2) looks spread over ``window`` seconds."""

    window: float
    samples: int
    thresholds: Thresholds
    json: bool
    verbose: bool


@dataclass(frozen=True, slots=True)
class ResetOptions(_OfTopics):
    """``reset-offsets GROUP``: ``partitions`` None means all of them."""

    all_topics: bool
    target: ResetTarget
    partitions: tuple[int, ...] | None
    execute: bool
    force: bool
    json: bool


@dataclass(frozen=True, slots=True)
class PauseOptions(_OfTopics):
    """``pause GROUP`` and ``resume GROUP``: ``partitions`` None means every partition of each
    topic; ``by`` is who writes it (``user@host``)."""

    action: PauseAction
    partitions: tuple[int, ...] | None
    json: bool
    by: str


@dataclass(frozen=True, slots=True)
class SkipOptions:
    """``skip GROUP``: one partition; ``to_offset`` None means just past the record it is
    stopped on; ``by`` is who writes it (``user@host``)."""

    group: str
    topic: str
    partition: int
    to_offset: int | None
    execute: bool
    json: bool
    by: str


@dataclass(frozen=True, slots=True)
class ConsumeOptions:
    """``consume GROUP TOPIC``: ``strategy`` None means that of the group's members."""

    group: str
    topic: str
    from_beginning: bool
    strategy: Strategy | None
    isolation_level: IsolationLevel


@dataclass(frozen=True, slots=True)
class DashboardOptions:
    """``dashboard``: where to serve, which groups (empty: all), how often to look, how long to
    keep, ``check``'s window and thresholds; ``token`` None means read-only."""

    host: str
    port: int
    groups: tuple[str, ...]
    interval: float
    keep: float
    window: float
    thresholds: Thresholds
    token: str | None = field(repr=False)


ServerOptions = (
    ListOptions
    | DescribeOptions
    | CheckOptions
    | ResetOptions
    | PauseOptions
    | SkipOptions
    | ConsumeOptions
    | DashboardOptions
)


@dataclass(frozen=True, slots=True)
class Invocation:
    """One run of the command: a subcommand's options, and the connection of those that speak
    to the servers (None for ``local``)."""

    options: ServerOptions | LocalOptions
    connection: Connection | None
