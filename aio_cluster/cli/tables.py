"""The tables the ``aio-cluster`` command prints, drawn with rich (the ``cli`` extra).

Only drawing here: the rows come computed from `aio_cluster.cli.plans`.
"""

from __future__ import annotations

import datetime as dt
import importlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from ..zookeeper.layout import MemberInfo
from .plans import LagRow, PlanRow, Unreadable, member_host

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["groups_table", "lag_table", "members_table", "plan_table", "show"]


def groups_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    """``list``: each group with its topics and how many members are registered."""
    table = _table("group", "topics", "members")
    for row in rows:
        table.add_row(row["group"], ", ".join(row["topics"]), str(row["members"]))
    return table


def members_table(group: str, members: Mapping[str, MemberInfo | None]) -> Table:
    """``describe``: the registered members (id, host, since when, strategy)."""
    title = f"members of {group}" + ("" if members else ": none registered")
    table = _table("member", "host", "since", "strategy", title=title)
    for member, info in sorted(members.items()):
        since = "-"
        strategy = "unreadable registration"
        if info is not None:
            strategy = str(getattr(info.strategy, "value", info.strategy))
            if info.since_ms is not None:
                moment = dt.datetime.fromtimestamp(info.since_ms / 1000, dt.timezone.utc)
                since = moment.isoformat(timespec="seconds")
        table.add_row(member, member_host(group, member) or "-", since, strategy)
    return table


def lag_table(rows: Sequence[LagRow]) -> Table:
    """``describe``: per partition its owner, committed offset, log end and lag."""
    table = _table("topic", "partition", "owner", "committed", "end", "lag", title="partitions")
    for row in rows:
        table.add_row(
            row.topic,
            str(row.partition),
            row.owner or "-",
            "-" if row.committed is None else str(row.committed),
            str(row.end),
            str(row.lag),
        )
    return table


def plan_table(plan: Sequence[PlanRow]) -> Table:
    """``reset-offsets``: per partition the offset stored now and the new one."""
    table = _table("partition", "old", "new")
    for row in plan:
        old = row.old
        if isinstance(old, Unreadable):
            shown = f"unreadable {old.data[:40]!r}"
        else:
            shown = "-" if old is None else str(old)
        table.add_row(str(row.partition), shown, str(row.new))
    return table


def show(renderable: object) -> None:
    """Print to stdout: fitted to a terminal; into a pipe or a file, whole lines for grep."""
    console = _rich("console").Console(soft_wrap=False)
    if not console.is_terminal:
        console.width = 10_000
    console.print(renderable)


def _table(*columns: str, title: str | None = None) -> Table:
    table: Table = _rich("table").Table(
        *columns, title=title, title_justify="left", box=None, pad_edge=False
    )
    for column in table.columns:
        column.overflow = "fold"
    return table


def _rich(module: str) -> Any:
    try:
        return importlib.import_module(f"rich.{module}")
    except ImportError:
        raise ConfigurationError(
            "the tables need rich: pip install 'aio-cluster[cli]' (or pass --json)"
        ) from None
