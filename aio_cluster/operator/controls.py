"""What ``aio-cluster pause``, ``resume`` and ``skip`` act on, apart from their I/O: the
partitions a pause or a resume names, and a skip's plan with its refusals. Pure functions of what
`aio_cluster.operator.operate` read from ZooKeeper and Kafka, so that every rule here is tested
without servers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..control.model import Key, Pause, Skip, Stopped, format_at
from ..errors import ConfigurationError, ControlConflictError, SkipRefusedError
from .health import stopped_json, stopped_text

__all__ = [
    "SkipPlan",
    "pause_rows",
    "plan_skip",
    "select_keys",
]


def select_keys(partitions: Mapping[str, Sequence[int]], wanted: Sequence[int] | None) -> list[Key]:
    """The partitions a pause or a resume acts on: every partition of every topic, or the
    ``wanted`` numbers of each, sorted.

    Args:
        partitions: each topic, with the partitions Kafka has of it.
        wanted: the ``--partition`` numbers, None where none was given.

    Raises:
        ConfigurationError: a wanted partition is not in one of the topics (every such is named,
            with the partitions the topic has): nothing is acted on.
    """
    if wanted is None:
        return sorted((topic, p) for topic, found in partitions.items() for p in found)
    missing = [
        f"topic {topic} has no partition {', '.join(map(str, absent))} (it has {_numbers(found)})"
        for topic, found in partitions.items()
        if (absent := sorted(set(wanted) - set(found)))
    ]
    if missing:
        raise ConfigurationError("; ".join(missing))
    return sorted((topic, p) for topic in partitions for p in set(wanted))


def _numbers(found: Sequence[int]) -> str:
    """``0-5`` for a topic's partitions (always 0 to n-1 in Kafka), a list otherwise."""
    ordered = sorted(found)
    if ordered == list(range(len(ordered))) and len(ordered) > 1:
        return f"0-{len(ordered) - 1}"
    return ", ".join(map(str, ordered)) or "none"


def pause_rows(pauses: Sequence[Pause]) -> list[dict[str, object]]:
    """The objects ``pause --json`` and ``resume --json`` print: one per partition."""
    return [
        {"topic": p.topic, "partition": p.partition, "by": p.by, "at": format_at(p.at)}
        for p in sorted(pauses, key=lambda p: (p.topic, p.partition))
    ]


@dataclass(frozen=True)
class SkipPlan:
    """A skip as ``skip`` shows it before it is requested.

    Attributes:
        topic: the partition's topic.
        partition: its number.
        owner: the member that owns it (and applies the skip at a batch boundary).
        committed: the offset stored for the group, None where none is.
        end: the partition's log end.
        stopped: the record ``on_failure="stop"`` stopped it on, None where it is not stopped.
        start: the first offset skipped: the record it is stopped on, else the stored offset
            (the earliest retained one where nothing is stored).
        target: the offset its owner goes on from: ``--to-offset``, else just past the record
            it is stopped on.
    """

    topic: str
    partition: int
    owner: str
    committed: int | None
    end: int
    stopped: Stopped | None
    start: int
    target: int

    @property
    def skipped(self) -> int:
        """How many records are never handled (the offsets from `start` up to `target`)."""
        return self.target - self.start

    def lines(self) -> list[str]:
        """The plan for people, a line each: the partition, its owner, what it is stopped on,
        what is skipped."""
        where = f"{self.topic}/{self.partition}"
        stored = "nothing stored" if self.committed is None else f"stored offset {self.committed}"
        records = "record" if self.skipped == 1 else "records"
        return [
            f"partition {where}: owner {self.owner}, {stored}, log end {self.end}",
            f"{where} is {stopped_text(self.stopped)}"
            if self.stopped is not None
            else f"{where} is not stopped",
            f"skip: offsets {self.start} to {self.target - 1} ({self.skipped} {records}) are "
            f"never handled; its owner goes on from offset {self.target}",
        ]

    def as_json(self, *, requested: bool) -> dict[str, object]:
        """The object ``skip --json`` prints; ``requested`` says whether the skip was written
        (``--execute``) or is a plan."""
        return {
            "topic": self.topic,
            "partition": self.partition,
            "owner": self.owner,
            "committed": self.committed,
            "end": self.end,
            "stopped": None if self.stopped is None else stopped_json(self.stopped),
            "from": self.start,
            "to": self.target,
            "skipped": self.skipped,
            "requested": requested,
        }


def plan_skip(
    key: Key,
    owner: str | None,
    committed: int | None,
    bounds: tuple[int, int],
    stopped: Stopped | None,
    pending: Skip | None,
    to_offset: int | None,
) -> SkipPlan:
    """The plan of a skip of one partition, or why it cannot be made.

    Args:
        key: the partition.
        owner: the member id its claim node holds, None where nobody owns it.
        committed: the offset stored for the group, None where none is.
        bounds: its earliest retained offset and its log end.
        stopped: the record ``on_failure="stop"`` stopped it on, None where it is not stopped.
        pending: a skip of it its owner has not applied yet, None where there is none.
        to_offset: ``--to-offset``, None for "just past the record it is stopped on".

    Raises:
        ControlConflictError: a skip of the partition is pending already (another operator's).
        SkipRefusedError: nobody owns the partition (nobody would apply it); no ``to_offset``
            and it is not stopped; ``to_offset`` not past where the partition is (a skip only
            moves forward) or past its log end.
    """
    topic, partition = key
    where = f"{topic}/{partition}"
    earliest, end = bounds
    if pending is not None:
        raise ControlConflictError(
            f"a skip of {where} to offset {pending.target} is pending already (by {pending.by} "
            f"at {format_at(pending.at)}): its owner applies it at its next batch; look again "
            "with describe"
        )
    if owner is None:
        raise SkipRefusedError(
            f"refused: nobody owns {where}, so nobody would apply a skip; while the group does "
            "not read it, move its offset with reset-offsets"
        )
    if stopped is not None:
        start = stopped.offset
    else:
        start = earliest if committed is None else max(committed, earliest)
    if to_offset is None:
        if stopped is None:
            raise SkipRefusedError(
                f"refused: {where} is not stopped on a record; name where it goes on with "
                "--to-offset N"
            )
        target = stopped.offset + 1
    else:
        target = to_offset
    if target <= start:
        raise SkipRefusedError(
            f"refused: --to-offset {target} is not past offset {start}, where {where} is: a "
            "skip only moves forward (reset-offsets moves back)"
        )
    if target > end:
        raise SkipRefusedError(
            f"refused: --to-offset {target} is past the log end of {where} ({end})"
        )
    return SkipPlan(topic, partition, owner, committed, end, stopped, start, target)
