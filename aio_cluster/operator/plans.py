"""What an operator's tools compute, apart from their I/O: lag rows, reset plans, and the
parsing of a reset's partitions and time. Pure functions of what `aio_cluster.operator.survey`
and `aio_cluster.operator.looks` read from ZooKeeper and Kafka, so that every rule here is
tested without servers.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from ..assign.marks import Mark
from ..control.model import Controls, Pause, Skip, Stopped, Stuck, format_at
from ..errors import ConfigurationError
from ..member.statistics import lag
from ..zookeeper.layout import Registration, partition_named
from .health import (
    Sample,
    pause_json,
    pause_text,
    stopped_json,
    stopped_text,
    stuck_json,
    stuck_text,
    unreadable_json,
    unreadable_text,
)

__all__ = [
    "LagRow",
    "PlanRow",
    "ResetTarget",
    "ShiftBy",
    "ToEarliest",
    "ToLatest",
    "ToOffset",
    "ToTime",
    "Unreadable",
    "lag_rows",
    "may_read",
    "member_host",
    "member_json",
    "parse_partitions",
    "parse_timestamp",
    "plan_reset",
    "registered_host",
    "reset_topics",
    "select_partitions",
    "skip_json",
    "skip_text",
    "subscription_text",
    "unreadable_note",
]


@dataclass(frozen=True)
class Unreadable:
    """An offset node whose data is not a decimal offset (written by hand or by another tool)."""

    data: bytes


Stored = int | Unreadable | None
"""What a partition's offset node holds: an offset, something else, or nothing (no node)."""


@dataclass(frozen=True)
class LagRow:
    """One partition of ``describe``: who owns it, where the group is, where the log ends.

    ``lag`` counts the records the group has still to read, by the rule `statistics()` uses too
    (`aio_cluster.member.statistics.lag`): the log-end offset minus the committed one, or minus
    the earliest retained offset where nothing (readable) is committed, since a member starts
    there; never below 0 (an offset committed past the log end).

    ``paused``, ``stopped`` and ``skip`` are the operator's controls of the partition
    (`aio_cluster.control`): its pause, the record ``on_failure="stop"`` stopped it on, a skip
    its owner has not applied yet; None where there is none. ``unreadable`` is the owner's mark
    where it names the partition (the owner cannot read it: see docs/operating.md).
    its owner has not applied yet; None where there is none. ``stuck`` is a handler or batch
    body of the partition that has run past its member's ``stuck_after`` (its mark in
    ZooKeeper), and ``stuck_for`` how long it had run at the look.
    """

    topic: str
    partition: int
    owner: str | None
    committed: int | None
    end: int
    lag: int
    paused: Pause | None = None
    stopped: Stopped | None = None
    skip: Skip | None = None
    stuck: Stuck | None = None
    stuck_for: float = 0.0
    unreadable: Mark | None = None

    def as_json(self) -> dict[str, object]:
        """The object ``describe --json`` prints, with exactly these keys."""
        return {
            "topic": self.topic,
            "partition": self.partition,
            "owner": self.owner,
            "committed": self.committed,
            "end": self.end,
            "lag": self.lag,
            "paused": None if self.paused is None else pause_json(self.paused),
            "stopped": None if self.stopped is None else stopped_json(self.stopped),
            "skip": None if self.skip is None else skip_json(self.skip),
            "stuck": None if self.stuck is None else stuck_json(self.stuck, self.stuck_for),
            "unreadable": None
            if self.unreadable is None
            else unreadable_json(self.owner, self.unreadable, self.topic, self.partition),
        }

    def sample(self) -> Sample:
        """The row as one sample of ``check``'s window."""
        return Sample(
            self.owner,
            self.committed,
            self.lag,
            self.paused,
            self.stopped,
            self.stuck,
            self.stuck_for,
            self.unreadable,
        )

    def control_text(self) -> str:
        """The partition's controls in one cell: ``paused by ... at ...; stopped on offset 42
        (...)``; "" where it has none."""
        shown = []
        if self.paused is not None:
            shown.append(pause_text(self.paused))
        if self.stopped is not None:
            shown.append(stopped_text(self.stopped))
        if self.skip is not None:
            shown.append(skip_text(self.skip))
        if self.unreadable is not None:
            shown.append(unreadable_text(self.owner, self.unreadable, self.topic, self.partition))
        if self.stuck is not None:
            shown.append(stuck_text(self.stuck, self.stuck_for))
        return "; ".join(shown)


def skip_json(skip: Skip) -> dict[str, object]:
    """A pending skip in the command's JSON: where to, past which record, who asked, when."""
    return {
        "to": skip.target,
        "stopped_on": skip.stopped_on,
        "by": skip.by,
        "at": format_at(skip.at),
    }


def skip_text(skip: Skip) -> str:
    """``skip to 43 pending (by alice@host at 2026-08-01T12:00:00Z)``."""
    return f"skip to {skip.target} pending (by {skip.by} at {format_at(skip.at)})"


def lag_rows(
    topic: str,
    owners: Mapping[int, str],
    stored: Mapping[int, Stored],
    bounds: Mapping[int, tuple[int, int]],
    controls: Controls | None = None,
    marks: Mapping[str, Mark] | None = None,
) -> list[LagRow]:
    """One row per partition of ``bounds`` (partition -> (earliest, log end)), sorted, with the
    group's ``controls`` of each, and its owner's mark where it names the partition."""
    held = Controls() if controls is None else controls
    rows = []
    for partition, (earliest, end) in sorted(bounds.items()):
        value = stored.get(partition)
        committed = value if isinstance(value, int) else None
        key = (topic, partition)
        owner = owners.get(partition)
        mark = (marks or {}).get(owner or "")
        if mark is not None and partition not in mark.partitions.get(topic, {}):
            mark = None
        rows.append(
            LagRow(
                topic,
                partition,
                owners.get(partition),
                committed,
                end,
                lag(end, committed, earliest),
                held.paused.get(key),
                held.stopped.get(key),
                held.skips.get(key),
                unreadable=mark,
            )
        )
    return rows


_UNREADABLE_MEANS = {
    "paused": "members hold the partition while this node exists; resume lifts it",
    "skips": "its owner leaves it unapplied; delete the node to request the skip again",
    "stopped": "it goes with the session of the member that published it",
}
"""What an unreadable control node does, by the kind of node (its parent's parent)."""


_STRAY_MEANS = "no partition is named so: members ignore it; delete the node"
"""What a control node named as no topic or partition is (`partition_named`) does."""


def unreadable_note(path: str, why: str) -> str:
    """The note ``describe``, ``check`` and the dashboard show for a control node that cannot be
    read (``why``: what was wrong): the node is named, and what it still does."""
    parts = path.split("/")
    if partition_named(parts[-1]) is None:
        means: str | None = _STRAY_MEANS
    else:
        means = _UNREADABLE_MEANS.get(parts[-3] if len(parts) > 3 else "")
    return f"control node {path} is unreadable, left out: {why}" + (f" ({means})" if means else "")


def may_read(info: Registration | None, topic: str) -> bool:
    """Whether a reset must count a registered member as reading ``topic``: it does by the
    library's rules, or its registration cannot be read, or records a subscription the library
    does not read as written (`Registration.understood`), so that a reset never overwrites
    offsets of a member it cannot rule out."""
    return info is None or not info.understood or info.subscribes(topic)


def readers(members: Mapping[str, Registration | None], topic: str) -> list[str]:
    """The registered members a reset of ``topic`` must count as reading it (`may_read`),
    sorted."""
    return sorted(member for member, info in members.items() if may_read(info, topic))


def subscription_text(info: Registration) -> str:
    """A registration's subscription in one cell: ``a, b`` or ``white_list events\\..*``."""
    listed = ", ".join(info.entries) or "-"
    return listed if info.pattern == "static" else f"{info.pattern} {listed}"


def member_json(
    member: str, host: str | None, info: Registration | None, partitions: int
) -> dict[str, object]:
    """The object ``describe --members --json`` prints for a member (its registration's fields
    None where it cannot be read)."""
    if info is None:
        return {
            "member": member,
            "name": None,
            "host": host,
            "rack": None,
            "since": None,
            "strategy": None,
            "pattern": None,
            "subscription": [],
            "partitions": partitions,
        }
    return {
        "member": member,
        "name": info.name,
        "host": host,
        "rack": info.rack,
        "since": _iso(info.since_ms),
        "strategy": str(getattr(info.strategy, "value", info.strategy)),
        "pattern": info.pattern,
        "subscription": list(info.entries),
        "partitions": partitions,
    }


def _iso(since_ms: int | None) -> str | None:
    if since_ms is None:
        return None
    return dt.datetime.fromtimestamp(since_ms / 1000, dt.timezone.utc).isoformat(timespec="seconds")


def reset_topics(
    group: str, named: Sequence[str] | None, all_topics: bool, held: Sequence[str]
) -> list[str]:
    """The topics a reset works on: those named with ``--topic``, every one the group holds
    (``--all-topics``), or, with neither, the group's only topic.

    Args:
        group: the group's name, for the errors.
        named: the ``--topic`` values, None where none was given.
        all_topics: whether ``--all-topics`` was given.
        held: the topics the group holds offsets or claims of, or members subscribe to.

    Raises:
        ConfigurationError: both or neither given where the group holds other than one topic.
    """
    if named and all_topics:
        raise ConfigurationError("--topic and --all-topics exclude each other: pass one")
    if named:
        return list(dict.fromkeys(named))
    if all_topics:
        if not held:
            raise ConfigurationError(
                f"group {group!r} holds no offsets or claims of any topic: --all-topics has "
                "nothing to reset; name one with --topic"
            )
        return list(held)
    if len(held) == 1:
        return list(held)
    if not held:
        raise ConfigurationError(
            f"group {group!r} holds no offsets or claims of any topic: name one with --topic"
        )
    raise ConfigurationError(
        f"group {group!r} holds offsets of {len(held)} topics ({', '.join(held)}): name the "
        "ones to reset with --topic (repeatable) or pass --all-topics"
    )


def registered_host(group: str, member_id: str, info: Registration | None) -> str | None:
    """The host a member runs on: the one its registration names, else the one in its id
    (`member_host`; a named member's id is its name, and older members name no host)."""
    return (info.host if info is not None else None) or member_host(group, member_id)


def member_host(group: str, member_id: str) -> str | None:
    """The host name in a member id of this library, ``<group>-<host>-<pid>-<time>-<n>``;
    None for an id of another form (a classic consumer's, say)."""
    prefix = f"{group}-"
    if not member_id.startswith(prefix):
        return None
    parts = member_id[len(prefix) :].rsplit("-", 3)
    if len(parts) != 4 or not parts[0] or not all(part.isdigit() for part in parts[1:]):
        return None
    return parts[0]


@dataclass(frozen=True)
class ToEarliest:
    """Reset to the earliest offset the broker retains."""


@dataclass(frozen=True)
class ToLatest:
    """Reset to the log end: the group skips everything written so far."""


@dataclass(frozen=True)
class ToOffset:
    """Reset to this offset (kept within the retained range)."""

    offset: int


@dataclass(frozen=True)
class ToTime:
    """Reset to the first record stamped at or after this time (the log end where none is)."""

    timestamp_ms: int


@dataclass(frozen=True)
class ShiftBy:
    """Move the committed offset by this many records (kept within the retained range)."""

    delta: int


ResetTarget = ToEarliest | ToLatest | ToOffset | ToTime | ShiftBy


@dataclass(frozen=True)
class PlanRow:
    """One partition of a reset: the offset stored now (or what is unreadable), the new one."""

    partition: int
    old: Stored
    new: int

    def as_json(self, topic: str, *, stored: bool) -> dict[str, object]:
        """The object ``reset-offsets --json`` prints: ``old`` is None where no offset (or an
        unreadable one, then ``unreadable`` holds its data) is stored; ``stored`` says whether
        ``new`` was written (--execute) or is a plan."""
        old = self.old
        return {
            "topic": topic,
            "partition": self.partition,
            "old": old if isinstance(old, int) else None,
            "unreadable": old.data.decode(errors="replace")
            if isinstance(old, Unreadable)
            else None,
            "new": self.new,
            "stored": stored,
        }


def plan_reset(
    target: ResetTarget,
    stored: Mapping[int, Stored],
    bounds: Mapping[int, tuple[int, int]],
    at_time: Mapping[int, int | None] | None = None,
) -> list[PlanRow]:
    """The new offset of each partition of ``bounds`` (partition -> (earliest, log end)).

    Every new offset lies within the retained range, as Kafka's own reset tool keeps it.

    Args:
        target: where to go.
        stored: what the offset nodes hold now.
        bounds: the partitions to reset, with their earliest and log-end offsets.
        at_time: for `ToTime`, the offset found for its time in each partition.

    Raises:
        ConfigurationError: a shift of a partition whose stored offset is unreadable, or a
            `ToTime` without the offsets found for it.
    """
    rows = []
    for partition, (earliest, end) in sorted(bounds.items()):
        old = stored.get(partition)
        if isinstance(target, ToEarliest):
            new = earliest
        elif isinstance(target, ToLatest):
            new = end
        elif isinstance(target, ToOffset):
            new = target.offset
        elif isinstance(target, ToTime):
            if at_time is None or partition not in at_time:
                raise ConfigurationError(f"no offset was looked up for partition {partition}")
            found = at_time[partition]
            new = end if found is None else found
        else:
            if isinstance(old, Unreadable):
                raise ConfigurationError(
                    f"partition {partition}'s offset node holds {old.data[:40]!r}, not an offset, "
                    "so it cannot be shifted; reset it --to-earliest, --to-latest or --to-offset"
                )
            new = (earliest if old is None else old) + target.delta
        rows.append(PlanRow(partition, old, min(max(new, earliest), end)))
    return rows


def select_partitions(partitions: Collection[int], wanted: Sequence[int] | None) -> list[int]:
    """The partitions to work on: all of them, or the ``wanted`` ones, sorted.

    Raises:
        ConfigurationError: a wanted partition does not exist (all such are named).
    """
    if wanted is None:
        return sorted(partitions)
    missing = sorted(set(wanted) - set(partitions))
    if missing:
        raise ConfigurationError(
            f"partitions {missing} do not exist; the topic has {sorted(partitions)}"
        )
    return sorted(set(wanted))


def parse_partitions(text: str) -> list[int]:
    """``"0,3"`` -> ``[0, 3]``.

    Raises:
        ConfigurationError: empty, or an item that is not a non-negative integer.
    """
    items = [item.strip() for item in text.split(",")]
    if not all(item.isascii() and item.isdigit() for item in items):
        raise ConfigurationError(
            f"--partitions {text!r} is not a comma-separated list of partition numbers"
        )
    return [int(item) for item in items]


def parse_timestamp(text: str) -> int:
    """An ISO 8601 time as Unix milliseconds; a time without a zone is taken as UTC.

    Raises:
        ConfigurationError: the text is not an ISO 8601 date or time.
    """
    try:
        moment = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ConfigurationError(
            f"--to-datetime {text!r} is not an ISO 8601 time such as 2026-12-03T04:00:00Z"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return int(moment.timestamp() * 1000)
