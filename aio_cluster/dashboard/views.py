"""What a page shows of a group's history, apart from how it is drawn: the rows of its tables,
aggregated, filtered and cut into pages, so that 10,000 partitions over 100 members stay a page
an operator can read. Pure: `aio_cluster.dashboard.pages` turns these into HTML.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..operator.health import PartitionHealth, Severity, Status
from ..operator.plans import LagRow, member_host, member_json
from ..zookeeper.layout import Registration
from .history import GroupHistory

__all__ = [
    "PAGE_SIZES",
    "Aggregate",
    "Filters",
    "PartitionPage",
    "PartitionRow",
    "aggregate",
    "member_rows",
    "partition_page",
    "reasons",
]

PAGE_SIZES = (25, 50, 100, 500)
"""The page sizes the partitions table offers; the first is the default."""

NO_OWNER = "-"
"""The owner filter's value for partitions nobody claims."""


@dataclass(frozen=True)
class Filters:
    """What the partitions table is narrowed to (from the page's query string).

    Attributes:
        topic: one topic, or "" for all.
        owner: one member id, `NO_OWNER` for the unowned ones, or "" for all.
        status: one `Status` value (``lagging``...), or "" for all.
        page: the page shown, from 1.
        size: rows per page, one of `PAGE_SIZES`.
    """

    topic: str = ""
    owner: str = ""
    status: str = ""
    page: int = 1
    size: int = PAGE_SIZES[0]

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> Filters:
        """The filters of a query string; a value that makes no sense is the default."""
        status = query.get("status", "")
        try:
            page = max(int(query.get("page", "1")), 1)
        except ValueError:
            page = 1
        try:
            size = int(query.get("size", str(PAGE_SIZES[0])))
        except ValueError:
            size = PAGE_SIZES[0]
        return cls(
            topic=query.get("topic", ""),
            owner=query.get("owner", ""),
            status=status if status in {s.value for s in Status} else "",
            page=page,
            size=size if size in PAGE_SIZES else PAGE_SIZES[0],
        )

    def query(self, **changed: object) -> dict[str, str]:
        """The query string of these filters with ``changed`` ones, defaults left out."""
        values = {
            "topic": self.topic,
            "owner": self.owner,
            "status": self.status,
            "page": self.page,
            "size": self.size,
        }
        values.update(changed)
        defaults = {"page": 1, "size": PAGE_SIZES[0]}
        return {k: str(v) for k, v in values.items() if v not in ("", defaults.get(k))}


@dataclass(frozen=True)
class PartitionRow:
    """One line of the partitions table: the look's row and the partition's verdict."""

    row: LagRow
    status: Status | None
    severity: Severity


@dataclass(frozen=True)
class PartitionPage:
    """One page of the filtered partitions, and where it lies among them."""

    rows: list[PartitionRow]
    matching: int
    page: int
    pages: int


def partition_page(history: GroupHistory, filters: Filters) -> PartitionPage:
    """The partitions that pass ``filters``, the most lagging first, cut to the page asked for
    (the last one where it asks past the end)."""
    judged = {(f.topic, f.partition): f for f in history.findings}
    rows = []
    for row in history.rows:
        if filters.topic and row.topic != filters.topic:
            continue
        if filters.owner and (row.owner or NO_OWNER) != filters.owner:
            continue
        finding = judged.get((row.topic, row.partition))
        if filters.status and (finding is None or finding.status.value != filters.status):
            continue
        status = None if finding is None else finding.status
        severity = Severity.OK if finding is None else finding.severity
        rows.append(PartitionRow(row, status, severity))
    rows.sort(key=lambda r: (-r.row.lag, r.row.topic, r.row.partition))
    pages = max(math.ceil(len(rows) / filters.size), 1)
    page = min(filters.page, pages)
    start = (page - 1) * filters.size
    return PartitionPage(rows[start : start + filters.size], len(rows), page, pages)


@dataclass(frozen=True)
class Aggregate:
    """The partitions of one topic or one owner, summed."""

    name: str
    partitions: int
    lag: int
    worst: Severity


def aggregate(history: GroupHistory, by: str) -> list[Aggregate]:
    """The partitions summed per ``"topic"`` or per ``"owner"`` (`NO_OWNER` for no owner),
    the most lagging first."""
    worst = {(f.topic, f.partition): f.severity for f in history.findings}
    sums: dict[str, tuple[int, int, Severity]] = {}
    for row in history.rows:
        name = row.topic if by == "topic" else (row.owner or NO_OWNER)
        count, lag, severity = sums.get(name, (0, 0, Severity.OK))
        found = worst.get((row.topic, row.partition), Severity.OK)
        sums[name] = (count + 1, lag + row.lag, max(severity, found))
    found_rows = [Aggregate(name, *values) for name, values in sums.items()]
    return sorted(found_rows, key=lambda a: (-a.lag, a.name))


def member_rows(
    group: str, members: Mapping[str, Registration | None], claimed: Mapping[str, int]
) -> list[dict[str, object]]:
    """The registered members as ``describe --members --json`` shows them (`member_json`),
    oldest first (by registration; unreadable ones last). A member's host is the one its
    registration names, else the one in its id (a named member's id is its name: no host)."""
    rows = [
        member_json(
            member,
            (info.host if info is not None else None) or member_host(group, member),
            info,
            claimed.get(member, 0),
        )
        for member, info in members.items()
    ]
    return sorted(rows, key=lambda r: (r["since"] is None, str(r["since"] or ""), str(r["member"])))


def reasons(
    findings: Sequence[PartitionHealth], limit: int
) -> tuple[dict[Status, int], list[PartitionHealth]]:
    """The findings worse than ok: how many partitions each status has, and the ``limit`` worst
    of them (worst severity, then most lag) to name with their reasons."""
    bad = [f for f in findings if f.severity > Severity.OK]
    counts: dict[Status, int] = {}
    for finding in bad:
        counts[finding.status] = counts.get(finding.status, 0) + 1
    bad.sort(key=lambda f: (-f.severity, -f.last.lag, f.topic, f.partition))
    return counts, bad[:limit]
