"""What an operator's control of a group holds, and its JSON in ZooKeeper: pure, no I/O.

Times are Unix seconds (`format_at` writes one for people). ``by`` is a free "who" text: the
command writes ``user@host``, the dashboard ``dashboard <remote address>``.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

from ..errors import CoordinationError

__all__ = [
    "Action",
    "ControlEvent",
    "Controls",
    "Key",
    "Pause",
    "Skip",
    "Stopped",
    "Stuck",
    "decode_event",
    "decode_pause",
    "decode_skip",
    "decode_stopped",
    "decode_stuck",
    "encode_event",
    "encode_pause",
    "encode_skip",
    "encode_stopped",
    "encode_stuck",
    "format_at",
]

Key = tuple[str, int]
"""A partition: its topic and number."""

StuckKind = Literal["handler", "body"]
"""What runs past ``stuck_after``: a handler of ``process()``, or a batch body of ``async for``."""

_STUCK_KINDS: dict[str, StuckKind] = {kind: kind for kind in get_args(StuckKind)}

Action = Literal["pause", "resume", "skip-requested", "skipped"]
"""What a history entry records."""

_ACTIONS: dict[str, Action] = {action: action for action in get_args(Action)}


@dataclass(frozen=True)
class Pause:
    """An operator's pause of one partition: no member hands out its records until resumed."""

    topic: str
    partition: int
    by: str
    at: float


@dataclass(frozen=True)
class Skip:
    """A skip the partition's owner has not applied yet: its next offset becomes ``to_offset``,
    or, where that is None, the offset just past the record it is stopped on (``stopped_on``,
    as the request saw it)."""

    topic: str
    partition: int
    to_offset: int | None
    stopped_on: int | None
    by: str
    at: float

    @property
    def target(self) -> int | None:
        """The offset the partition moves to: ``to_offset``, else ``stopped_on + 1``."""
        if self.to_offset is not None:
            return self.to_offset
        return None if self.stopped_on is None else self.stopped_on + 1


@dataclass(frozen=True)
class Stopped:
    """A partition ``on_failure="stop"`` stopped: on which record, with which error, by which
    member (published by the owner while the partition stays stopped)."""

    topic: str
    partition: int
    member: str
    offset: int
    error: str
    at: float


@dataclass(frozen=True)
class Stuck:
    """A partition whose oldest handler (``kind="handler"``, of ``process()`` or
    ``process_bulk()``) or batch body (``kind="body"``, of ``async for``) has run past the
    member's ``stuck_after``: published by that member while it runs, on its session.

    Attributes:
        topic: the partition's topic.
        partition: the partition.
        member: the member it runs in.
        kind: ``"handler"`` or ``"body"``.
        offset: the record the handler runs for; the first record of the body's batch.
        since: when it started (Unix seconds, the member's clock).
    """

    topic: str
    partition: int
    member: str
    kind: StuckKind
    offset: int
    since: float


@dataclass(frozen=True)
class ControlEvent:
    """One entry of a group's control history."""

    at: float
    by: str
    action: Action
    topic: str
    partition: int
    detail: str = ""


@dataclass(frozen=True)
class Controls:
    """A group's controls as read at one moment, by partition; ``unreadable`` holds the control
    nodes that could not be read as what they should be (a stranger's write, a truncated node):
    their path -> what was wrong. They are left out of the rest, so that one bad node hides
    nothing else."""

    paused: Mapping[Key, Pause] = field(default_factory=dict)
    skips: Mapping[Key, Skip] = field(default_factory=dict)
    stopped: Mapping[Key, Stopped] = field(default_factory=dict)
    unreadable: Mapping[str, str] = field(default_factory=dict)


def format_at(at: float) -> str:
    """A time for people: ISO 8601 in UTC, to the second (``2026-08-01T12:00:00Z``)."""
    moment = datetime.datetime.fromtimestamp(at, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _dump(doc: Mapping[str, object]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _load(kind: str, where: str, data: bytes) -> dict[str, object]:
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise CoordinationError(f"{kind} {where} holds {data[:80]!r}, not JSON") from exc
    if not isinstance(doc, dict):
        raise CoordinationError(f"{kind} {where} holds {data[:80]!r}, not a JSON object")
    return doc


def _text(kind: str, where: str, doc: Mapping[str, object], name: str) -> str:
    value = doc.get(name)
    if not isinstance(value, str):
        raise CoordinationError(f"{kind} {where}: {name!r} is {value!r}, not a text")
    return value


_LAST_TIME = 253402300799.0
"""The last second `format_at` can write (the end of year 9999)."""

_LAST_OFFSET = 2**63 - 1
"""The largest offset Kafka has (an int64): a skip to one past it could not be fetched."""


def _time(kind: str, where: str, doc: Mapping[str, object], name: str) -> float:
    """A time `format_at` can write: JSON's ``NaN``, ``Infinity`` or ``1e300`` is none."""
    value = doc.get(name)
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 <= value <= _LAST_TIME
    ):
        raise CoordinationError(f"{kind} {where}: {name!r} is {value!r}, not a time")
    return float(value)


def _offset(kind: str, where: str, doc: Mapping[str, object], name: str) -> int:
    value = doc.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _LAST_OFFSET:
        raise CoordinationError(f"{kind} {where}: {name!r} is {value!r}, not an offset")
    return value


def _optional_offset(kind: str, where: str, doc: Mapping[str, object], name: str) -> int | None:
    return None if doc.get(name) is None else _offset(kind, where, doc, name)


def encode_pause(pause: Pause) -> bytes:
    """A pause node's data."""
    return _dump({"by": pause.by, "at": pause.at})


def decode_pause(topic: str, partition: int, data: bytes) -> Pause:
    """Read a pause node of ``topic``/``partition``.

    Raises:
        CoordinationError: the data is not a pause (the partition and the data are named).
    """
    where = f"{topic}/{partition}"
    doc = _load("pause", where, data)
    return Pause(
        topic,
        partition,
        by=_text("pause", where, doc, "by"),
        at=_time("pause", where, doc, "at"),
    )


def encode_skip(skip: Skip) -> bytes:
    """A skip node's data."""
    return _dump(
        {"to": skip.to_offset, "stopped_on": skip.stopped_on, "by": skip.by, "at": skip.at}
    )


def decode_skip(topic: str, partition: int, data: bytes) -> Skip:
    """Read a skip node of ``topic``/``partition``.

    Raises:
        CoordinationError: the data is not a skip, or says neither where to nor past what.
    """
    where = f"{topic}/{partition}"
    doc = _load("skip", where, data)
    skip = Skip(
        topic,
        partition,
        to_offset=_optional_offset("skip", where, doc, "to"),
        stopped_on=_optional_offset("skip", where, doc, "stopped_on"),
        by=_text("skip", where, doc, "by"),
        at=_time("skip", where, doc, "at"),
    )
    if skip.target is None:
        raise CoordinationError(f"skip {where} names neither 'to' nor 'stopped_on'")
    return skip


def encode_stopped(stopped: Stopped) -> bytes:
    """A stopped node's data."""
    return _dump(
        {
            "member": stopped.member,
            "offset": stopped.offset,
            "error": stopped.error,
            "at": stopped.at,
        }
    )


def decode_stopped(topic: str, partition: int, data: bytes) -> Stopped:
    """Read a stopped node of ``topic``/``partition``.

    Raises:
        CoordinationError: the data is not a stop.
    """
    where = f"{topic}/{partition}"
    doc = _load("stop", where, data)
    return Stopped(
        topic,
        partition,
        member=_text("stop", where, doc, "member"),
        offset=_offset("stop", where, doc, "offset"),
        error=_text("stop", where, doc, "error"),
        at=_time("stop", where, doc, "at"),
    )


def encode_stuck(stuck: Stuck) -> bytes:
    """A stuck node's data."""
    return _dump(
        {
            "member": stuck.member,
            "kind": stuck.kind,
            "offset": stuck.offset,
            "since": stuck.since,
        }
    )


def decode_stuck(topic: str, partition: int, data: bytes) -> Stuck:
    """Read a stuck node of ``topic``/``partition``.

    Raises:
        CoordinationError: the data is not a stuck mark.
    """
    where = f"{topic}/{partition}"
    doc = _load("stuck mark", where, data)
    text = _text("stuck mark", where, doc, "kind")
    kind = _STUCK_KINDS.get(text)
    if kind is None:
        raise CoordinationError(f"stuck mark {where}: unknown kind {text!r}")
    return Stuck(
        topic,
        partition,
        member=_text("stuck mark", where, doc, "member"),
        kind=kind,
        offset=_offset("stuck mark", where, doc, "offset"),
        since=_time("stuck mark", where, doc, "since"),
    )


def encode_event(event: ControlEvent) -> bytes:
    """A history entry's data."""
    return _dump(
        {
            "at": event.at,
            "by": event.by,
            "action": event.action,
            "topic": event.topic,
            "partition": event.partition,
            "detail": event.detail,
        }
    )


def decode_event(where: str, data: bytes) -> ControlEvent:
    """Read a history entry (``where`` names it in errors).

    Raises:
        CoordinationError: the data is not a control event.
    """
    doc = _load("history entry", where, data)
    text = _text("history entry", where, doc, "action")
    action = _ACTIONS.get(text)
    if action is None:
        raise CoordinationError(f"history entry {where}: unknown action {text!r}")
    return ControlEvent(
        at=_time("history entry", where, doc, "at"),
        by=_text("history entry", where, doc, "by"),
        action=action,
        topic=_text("history entry", where, doc, "topic"),
        partition=_offset("history entry", where, doc, "partition"),
        detail=_text("history entry", where, doc, "detail"),
    )
