"""What the dashboard remembers of a group between its own periodic looks: lag over time per topic
and per member, each partition's samples for the verdict of ``aio-cluster check``, who owned
which partition when (each look's rows also say which partitions are paused, stopped or
waiting for a skip), the newest entries of the group's control history; and whether each
server answered. Pure: the looks come from
`aio_cluster.dashboard.watch`.

Nothing here is read from the servers twice: a look is what `aio_cluster.operator.looks.look`
returns (the members, a `LagRow` per partition), and the verdict is
`aio_cluster.operator.health.judge` applied to the samples of the last ``window`` seconds, as
``check --window`` applies it to the samples it takes. Memory is bounded by time: lag points
older than ``keep`` seconds, samples older than ``window`` seconds and ownership spans that ended
before ``keep`` seconds ago are dropped.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ..control.model import ControlEvent
from ..operator.health import PartitionHealth, Sample, Severity, Thresholds, judge, verdict
from ..operator.plans import LagRow
from ..zookeeper.layout import Registration

__all__ = [
    "UNOWNED",
    "GroupHistory",
    "LagPoint",
    "OwnerChange",
    "Reachability",
    "Span",
    "TopicPartitionKey",
]

UNOWNED = "(unowned)"
"""The name lag of partitions that no member claims is summed under, per member."""

TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True)
class LagPoint:
    """The group's lag at one look, summed per topic and per owning member."""

    at: float
    by_topic: Mapping[str, int]
    by_member: Mapping[str, int]


@dataclass(frozen=True)
class OwnerChange:
    """A partition whose owner differed from one look to the next (None: no owner)."""

    at: float
    topic: str
    partition: int
    before: str | None
    after: str | None


@dataclass(frozen=True)
class Span:
    """A time a partition had one owner (None: none); ``end`` None while it lasts."""

    owner: str | None
    start: float
    end: float | None


@dataclass
class GroupHistory:
    """One group as the dashboard's looks saw it, the newest look first in importance.

    Attributes:
        group: the group's name.
        keep: seconds of lag points and ownership spans kept (the charts' longest window).
        window: seconds of samples each partition's verdict is judged on (``check --window``).
        thresholds: ``check``'s ``--lag-threshold`` and ``--max-lag``.
    """

    group: str
    keep: float
    window: float
    thresholds: Thresholds = field(default_factory=Thresholds)
    looked_at: float | None = None
    members: dict[str, Registration | None] = field(default_factory=dict)
    rows: list[LagRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    points: deque[LagPoint] = field(default_factory=deque)
    changes: deque[OwnerChange] = field(default_factory=deque)
    findings: list[PartitionHealth] = field(default_factory=list)
    events: list[ControlEvent] = field(default_factory=list)
    _samples: dict[TopicPartitionKey, deque[tuple[float, Sample]]] = field(default_factory=dict)
    _spans: dict[TopicPartitionKey, deque[Span]] = field(default_factory=dict)

    def record(
        self,
        at: float,
        members: Mapping[str, Registration | None],
        rows: Sequence[LagRow],
        notes: Sequence[str] = (),
    ) -> None:
        """Take one look, made at ``at`` (Unix seconds)."""
        self.looked_at = at
        self.members = dict(members)
        self.rows = list(rows)
        self.notes = list(notes)
        by_topic: dict[str, int] = {}
        by_member: dict[str, int] = dict.fromkeys(members, 0)
        for row in rows:
            by_topic[row.topic] = by_topic.get(row.topic, 0) + row.lag
            owner = row.owner or UNOWNED
            by_member[owner] = by_member.get(owner, 0) + row.lag
        self.points.append(LagPoint(at, by_topic, by_member))
        seen = set()
        for row in rows:
            key = (row.topic, row.partition)
            seen.add(key)
            self._sample(key, at, row.sample())
            self._own(key, at, row.owner)
        for gone in (set(self._samples) | set(self._spans)) - seen:  # a topic deleted, say
            self._samples.pop(gone, None)
            self._spans.pop(gone, None)
        self._forget(at)
        self.findings = [
            judge(topic, partition, [sample for _, sample in samples], self.thresholds)
            for (topic, partition), samples in sorted(self._samples.items())
            if len(samples) >= 2  # a single look is no verdict
        ]

    def record_events(self, events: Sequence[ControlEvent]) -> None:
        """Take the newest entries of the group's control history (pauses, resumes, skips),
        newest first, as read at the last look."""
        self.events = list(events)

    def _sample(self, key: TopicPartitionKey, at: float, sample: Sample) -> None:
        self._samples.setdefault(key, deque()).append((at, sample))

    def _own(self, key: TopicPartitionKey, at: float, owner: str | None) -> None:
        spans = self._spans.setdefault(key, deque())
        if spans and spans[-1].end is None:
            if spans[-1].owner == owner:
                return
            last = spans.pop()
            spans.append(Span(last.owner, last.start, at))
            self.changes.append(OwnerChange(at, key[0], key[1], last.owner, owner))
        spans.append(Span(owner, at, None))

    def _forget(self, now: float) -> None:
        while self.points and self.points[0].at < now - self.keep:
            self.points.popleft()
        while self.changes and self.changes[0].at < now - self.keep:
            self.changes.popleft()
        for samples in self._samples.values():
            while samples and samples[0][0] < now - self.window:
                samples.popleft()
        for spans in self._spans.values():
            while spans and spans[0].end is not None and spans[0].end < now - self.keep:
                spans.popleft()

    @property
    def verdict(self) -> Severity | None:
        """The group's verdict over the window; None before two looks."""
        return verdict(self.findings) if self.findings or len(self.points) >= 2 else None

    @property
    def total_lag(self) -> int:
        """The lag of every partition at the last look."""
        return sum(row.lag for row in self.rows)

    def topics(self) -> list[str]:
        """The topics of the last look, sorted."""
        return sorted({row.topic for row in self.rows})

    def claimed(self) -> dict[str, int]:
        """member id -> partitions it owned at the last look (every registered member, 0 too)."""
        counts = dict.fromkeys(self.members, 0)
        for row in self.rows:
            if row.owner is not None:
                counts[row.owner] = counts.get(row.owner, 0) + 1
        return counts

    def spans(self, keys: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, list[Span]]:
        """Who owned each of ``keys`` when, over the kept time, oldest first."""
        return {key: list(self._spans.get(key, ())) for key in keys}


@dataclass
class Reachability:
    """Whether a server answered the last refresh; since when it has not, and why."""

    name: str
    up: bool | None = None
    since: float | None = None
    reason: str = ""

    def answered(self, at: float) -> None:
        """It answered at ``at``."""
        if self.up is not True:
            self.up, self.since, self.reason = True, at, ""

    def failed(self, at: float, reason: str) -> None:
        """It did not answer at ``at``: ``reason`` (never a credential: the library's errors
        name servers and nodes, not secrets)."""
        if self.up is not False:
            self.since = at
        self.up, self.reason = False, reason
