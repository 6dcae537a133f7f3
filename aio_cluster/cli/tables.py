"""The tables the ``aio-cluster`` command prints, drawn with rich (a dependency of the package,
so that the installed command always does its main job).

Only drawing here: the rows come computed from `aio_cluster.operator.plans` and
`aio_cluster.operator.health`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..control.model import Pause, format_at
from ..operator.health import PartitionHealth
from ..operator.plans import LagRow, PlanRow, Unreadable, registered_host, subscription_text
from ..zookeeper.layout import Registration

__all__ = [
    "console",
    "groups_table",
    "health_table",
    "lag_table",
    "members_table",
    "pauses_table",
    "plan_table",
    "show",
]


def groups_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    """``list``: each group with its topics and how many members are registered."""
    table = _table("group", "topics", "members")
    for row in rows:
        table.add_row(row["group"], ", ".join(row["topics"]), str(row["members"]))
    return table


def members_table(
    group: str, members: Mapping[str, Registration | None], owned: Mapping[str, int]
) -> Table:
    """``describe``: the registered members (id, name, host, rack, since when, strategy, what
    they subscribe to, how many of the partitions shown they own). Names and patterns are shown as
    text, never read as rich markup (a pattern may hold brackets)."""
    title = f"members of {group}" + ("" if members else ": none registered")
    table = _table(
        "member",
        "name",
        "host",
        "rack",
        "since",
        "strategy",
        "subscription",
        "partitions",
        title=title,
    )
    for member, info in sorted(members.items()):
        since = "-"
        strategy = "unreadable registration"
        name = subscription = rack = "-"
        if info is not None:
            rack = info.rack or "-"
            strategy = str(getattr(info.strategy, "value", info.strategy))
            if info.since_ms is not None:
                moment = dt.datetime.fromtimestamp(info.since_ms / 1000, dt.timezone.utc)
                since = moment.isoformat(timespec="seconds")
            name = info.name or "-"
            subscription = subscription_text(info)
        table.add_row(
            member,
            Text(name),
            registered_host(group, member, info) or "-",
            Text(rack),
            since,
            Text(strategy),
            Text(subscription),
            str(owned.get(member, 0)),
        )
    return table


def lag_table(rows: Sequence[LagRow]) -> Table:
    """``describe``: per partition its owner, committed offset, log end and lag, and, where any
    partition shown has one, a column of the operator's controls (paused, stopped, a skip
    pending)."""
    controlled = any(row.control_text() for row in rows)
    columns = ["topic", "partition", "owner", "committed", "end", "lag"]
    table = _table(*columns, *(["control"] if controlled else []), title="partitions")
    for row in rows:
        cells: list[str | Text] = [
            row.topic,
            str(row.partition),
            row.owner or "-",
            "-" if row.committed is None else str(row.committed),
            str(row.end),
            str(row.lag),
        ]
        if controlled:
            cells.append(Text(row.control_text() or "-"))  # an error's text is no markup
        table.add_row(*cells)
    return table


def pauses_table(pauses: Sequence[Pause], *, resumed: bool) -> Table:
    """``pause`` and ``resume``: the partitions paused (or resumed), who paused them, when."""
    table = _table("topic", "partition", "was paused by" if resumed else "paused by", "at")
    for pause in sorted(pauses, key=lambda p: (p.topic, p.partition)):
        table.add_row(pause.topic, str(pause.partition), Text(pause.by), format_at(pause.at))
    return table


def plan_table(plans: Mapping[str, Sequence[PlanRow]]) -> Table:
    """``reset-offsets``: per topic and partition the offset stored now and the new one."""
    table = _table("topic", "partition", "old", "new")
    for topic, plan in plans.items():
        for row in plan:
            old = row.old
            if isinstance(old, Unreadable):
                shown = Text(f"unreadable {old.data[:40]!r}")
            else:
                shown = Text("-" if old is None else str(old))
            table.add_row(topic, str(row.partition), shown, str(row.new))
    return table


def health_table(findings: Sequence[PartitionHealth]) -> Table:
    """``check``: per partition its status, the rules that held, and the last sample; where any
    finding has one, a column of what its status holds (the record a stopped partition is
    stopped on, who paused a paused one)."""
    detailed = any(finding.detail() for finding in findings)
    columns = ["topic", "partition", "status", "owner", "committed", "lag", "also"]
    table = _table(*columns, *(["detail"] if detailed else []))
    for finding in findings:
        last = finding.last
        cells: list[str | Text] = [
            finding.topic,
            str(finding.partition),
            finding.status.value,
            last.owner or "-",
            "-" if last.committed is None else str(last.committed),
            str(last.lag),
            ", ".join(reason.value for reason in finding.reasons[1:]) or "-",
        ]
        if detailed:
            cells.append(Text(finding.detail() or "-"))
        table.add_row(*cells)
    return table


def console() -> Console:
    """The console of stdout: fitted to a terminal; into a pipe or a file, whole lines for grep."""
    out = Console(soft_wrap=False)
    if not out.is_terminal:
        out.width = 10_000
    return out


def show(renderable: object) -> None:
    """Print to stdout (see `console`)."""
    console().print(renderable)


def _table(*columns: str, title: str | None = None) -> Table:
    table = Table(*columns, title=title, title_justify="left", box=None, pad_edge=False)
    for column in table.columns:
        column.overflow = "fold"
    return table
