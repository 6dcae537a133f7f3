"""The verdict of ``aio-cluster check``: rules an operator can read, applied to samples of a
group taken over a window (the dashboard's verdicts too). Pure: the samples are the caller's.

Burrow's evaluation is the model: a single look at a group says little (a lag of 500 is fine if it
falls, bad if nothing moves), so each partition is judged by how its committed offset and its lag
moved between the first and the last sample of the window. The rules, tried in this order
(the first that holds is the partition's status; every one that holds counts for the verdict)::

    rewound   the committed offset went backwards between two samples        error
    unowned   no member owned the partition in any sample                    error
              (a warning where its lag is within the threshold)
    unreadable  its owner marked it unreadable in the last sample (no         error
              progress fetching it for ``fetch_timeout``; no other member
              can read it either, or it would have moved): the finding
              names the member, the broker and the error
    stopped   ``on_failure="stop"`` stopped it on a record (in the last       error
              sample): the finding names the record and its error
    stuck     a handler or batch body of it has run past its member's       error
              ``stuck_after`` (in the last sample): the finding names the
              member, for how long, and the record
    paused    an operator's pause (``aio-cluster pause``) holds in the last   warning
              sample: the finding names who paused it and when
    stalled   the committed offset never moved, the lag above the threshold  error
    lagging   the lag grew from sample to sample and ends above the          warning
              threshold, or it ends above ``max_lag``
    ok        none of the above

A partition stopped or paused in any sample of the window is not judged stalled or lagging: the
stop or the pause explains both (one still in force at the last sample is its status; one lifted
during the window leaves it ok until the next window judges how it moves again).

The group's verdict is the worst severity of any rule that holds for any partition; the exit
status of the command is 0, 1 or 2 for ok, warning or error.
"""

from __future__ import annotations

import enum
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..assign.marks import Mark
from ..control.model import Pause, Stopped, Stuck, format_at
from ..errors import ConfigurationError

__all__ = [
    "PartitionHealth",
    "Sample",
    "Severity",
    "Status",
    "Thresholds",
    "judge",
    "parse_duration",
    "pause_json",
    "pause_text",
    "stopped_json",
    "stopped_text",
    "stuck_json",
    "stuck_text",
    "unreadable_json",
    "unreadable_text",
    "verdict",
]


class Severity(enum.IntEnum):
    """How bad a finding is; the value is the command's exit status."""

    OK = 0
    WARNING = 1
    ERROR = 2


class Status(enum.Enum):
    """What a partition's samples show, in the order the rules are tried."""

    REWOUND = "rewound"
    UNOWNED = "unowned"
    UNREADABLE = "unreadable"
    STOPPED = "stopped"
    STUCK = "stuck"
    PAUSED = "paused"
    STALLED = "stalled"
    LAGGING = "lagging"
    OK = "ok"


@dataclass(frozen=True)
class Sample:
    """One look at one partition.

    Attributes:
        owner: the member id its claim node held, None when unclaimed.
        committed: the offset stored for the group, None when none (readable) is.
        lag: the log end minus the committed offset (or minus the earliest retained one).
        paused: the operator's pause of the partition, None when it flows.
        stopped: the record ``on_failure="stop"`` stopped the partition on, None when none.
        stuck: the handler or batch body of the partition that has run past its member's
            ``stuck_after``, None when none.
        stuck_for: how long that one had run when the sample was taken (seconds).
        unreadable: the owner's mark, where it names this partition (its owner cannot read
            it); None otherwise.
    """

    owner: str | None
    committed: int | None
    lag: int
    paused: Pause | None = None
    stopped: Stopped | None = None
    stuck: Stuck | None = None
    stuck_for: float = 0.0
    unreadable: Mark | None = None


@dataclass(frozen=True)
class Thresholds:
    """The flags of ``check``.

    Attributes:
        lag: a lag at or below this counts as caught up: such a partition is never stalled or
            lagging, and unowned only as a warning.
        max_lag: a lag above this at the end of the window is lagging however it moved;
            None: no such bound.
    """

    lag: int = 0
    max_lag: int | None = None


@dataclass(frozen=True)
class PartitionHealth:
    """The finding of one partition: its status, and every rule that held, in the rules' order;
    ``last`` is its last sample (whose ``stopped`` names the record a stopped one is stopped on,
    whose ``paused`` says who paused it)."""

    topic: str
    partition: int
    status: Status
    severity: Severity
    reasons: tuple[Status, ...]
    last: Sample

    def as_json(self) -> dict[str, object]:
        """The object ``check --json`` prints for the partition."""
        return {
            "topic": self.topic,
            "partition": self.partition,
            "status": self.status.value,
            "severity": self.severity.name.lower(),
            "reasons": [reason.value for reason in self.reasons],
            "owner": self.last.owner,
            "committed": self.last.committed,
            "lag": self.last.lag,
            "paused": None if self.last.paused is None else pause_json(self.last.paused),
            "stopped": None if self.last.stopped is None else stopped_json(self.last.stopped),
            "stuck": None
            if self.last.stuck is None
            else stuck_json(self.last.stuck, self.last.stuck_for),
            "unreadable": None
            if self.last.unreadable is None
            else unreadable_json(self.last.owner, self.last.unreadable, self.topic, self.partition),
        }

    def detail(self) -> str:
        """What the status holds beyond its name, for people: the record a stopped partition
        is stopped on, who paused a paused one, which member a stuck one is stuck in and for
        how long; "" for the other statuses."""
        if self.status is Status.STOPPED and self.last.stopped is not None:
            return stopped_text(self.last.stopped)
        if self.status is Status.PAUSED and self.last.paused is not None:
            return pause_text(self.last.paused)
        if self.status is Status.UNREADABLE and self.last.unreadable is not None:
            return unreadable_text(
                self.last.owner, self.last.unreadable, self.topic, self.partition
            )
        if self.status is Status.STUCK and self.last.stuck is not None:
            return stuck_text(self.last.stuck, self.last.stuck_for)
        return ""


def pause_json(pause: Pause) -> dict[str, object]:
    """A pause in the command's JSON: who and when (ISO 8601, UTC)."""
    return {"by": pause.by, "at": format_at(pause.at)}


def stopped_json(stopped: Stopped) -> dict[str, object]:
    """A stop in the command's JSON: the member, the record's offset, its error, when."""
    return {
        "member": stopped.member,
        "offset": stopped.offset,
        "error": stopped.error,
        "at": format_at(stopped.at),
    }


def unreadable_json(
    member: str | None, mark: Mark, topic: str, partition: int
) -> dict[str, object]:
    """A mark of one partition in the command's JSON: the member, since when (ISO 8601,
    UTC), the leader it cannot read from and the error."""
    return {
        "member": member,
        "since": format_at(mark.since / 1000),
        "broker": mark.partitions.get(topic, {}).get(partition),
        "error": mark.error,
    }


def unreadable_text(member: str | None, mark: Mark, topic: str, partition: int) -> str:
    """``m1 cannot read it since 2026-08-01T12:00:00Z (broker 2, RequestTimedOutError)``."""
    broker = mark.partitions.get(topic, {}).get(partition)
    return (
        f"{member} cannot read it since {format_at(mark.since / 1000)} "
        f"(broker {'unknown' if broker is None else broker}, {mark.error})"
    )


def pause_text(pause: Pause) -> str:
    """``paused by alice@host at 2026-08-01T12:00:00Z``."""
    return f"paused by {pause.by} at {format_at(pause.at)}"


def stopped_text(stopped: Stopped) -> str:
    """``stopped on offset 42 (ValueError: bad record)``."""
    return f"stopped on offset {stopped.offset} ({stopped.error})"


def stuck_json(stuck: Stuck, seconds: float) -> dict[str, object]:
    """A stuck mark in the command's JSON: the member, what runs, its record, since when and for
    how long (seconds, when the look was taken)."""
    return {
        "member": stuck.member,
        "kind": stuck.kind,
        "offset": stuck.offset,
        "since": format_at(stuck.since),
        "seconds": round(seconds, 1),
    }


def stuck_text(stuck: Stuck, seconds: float) -> str:
    """``stuck for 95s in member m-1 (the handler of offset 42)``."""
    what = "handler of offset" if stuck.kind == "handler" else "loop body of the batch at offset"
    return f"stuck for {seconds:.0f}s in member {stuck.member} (the {what} {stuck.offset})"


def judge(
    topic: str, partition: int, samples: Sequence[Sample], thresholds: Thresholds
) -> PartitionHealth:
    """Apply the rules (see the module's table) to one partition's samples, oldest first.

    Raises:
        ConfigurationError: fewer than two samples: a single look is no verdict.
    """
    if len(samples) < 2:
        raise ConfigurationError("a verdict needs at least two samples of the window")
    committed = [s.committed for s in samples]
    lags = [s.lag for s in samples]
    last = samples[-1]
    found: list[tuple[Status, Severity]] = []
    if any(
        before is not None and after is not None and after < before
        for before, after in itertools.pairwise(committed)
    ):
        found.append((Status.REWOUND, Severity.ERROR))
    if all(s.owner is None for s in samples):
        waiting = last.lag > thresholds.lag
        found.append((Status.UNOWNED, Severity.ERROR if waiting else Severity.WARNING))
    if last.unreadable is not None:
        found.append((Status.UNREADABLE, Severity.ERROR))
    if last.stopped is not None:
        found.append((Status.STOPPED, Severity.ERROR))
    if last.stuck is not None:
        found.append((Status.STUCK, Severity.ERROR))
    if last.paused is not None:
        found.append((Status.PAUSED, Severity.WARNING))
    if not any(s.paused is not None or s.stopped is not None for s in samples):
        if len(set(committed)) == 1 and all(lag > thresholds.lag for lag in lags):
            found.append((Status.STALLED, Severity.ERROR))
        growing = all(b >= a for a, b in itertools.pairwise(lags)) and lags[-1] > lags[0]
        over = thresholds.max_lag is not None and last.lag > thresholds.max_lag
        if (growing and last.lag > thresholds.lag) or over:
            found.append((Status.LAGGING, Severity.WARNING))
    if not found:
        return PartitionHealth(topic, partition, Status.OK, Severity.OK, (), last)
    status, _ = found[0]
    return PartitionHealth(
        topic,
        partition,
        status,
        max(severity for _, severity in found),
        tuple(reason for reason, _ in found),
        last,
    )


def verdict(findings: Sequence[PartitionHealth]) -> Severity:
    """The group's verdict: the worst finding (ok for a group without partitions)."""
    return max((finding.severity for finding in findings), default=Severity.OK)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)?")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str, option: str) -> float:
    """``"30s"``, ``"500ms"``, ``"2m"``, ``"1h"`` or plain seconds as seconds.

    Raises:
        ConfigurationError: not such a duration, or not positive (``option`` names the flag).
    """
    match = _DURATION.fullmatch(text.strip())
    seconds = float(match[1]) * _UNITS[match[2] or "s"] if match else 0.0
    if not seconds > 0:
        raise ConfigurationError(
            f"{option} {text!r} is not a positive duration such as 30s, 500ms or 2m"
        )
    return seconds
