"""The dashboard's charts, drawn on the server as SVG text: lag over time (one line per topic or
member) and the ownership timeline (one lane per partition, coloured by owner). Pure.

Why SVG from the server rather than a JavaScript charting library: the page then needs no asset
besides a small script that swaps HTML fragments, a chart costs the browser nothing to draw
however many partitions the group has (the server has already summed them into a few lines),
it is visible without JavaScript and in a screenshot, and there is no front-end dependency to
vendor, audit and upgrade.
"""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Mapping, Sequence

from .history import Span

__all__ = ["colour", "lag_chart", "timeline"]

_PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
_NONE = "#dddddd"

WIDTH = 720
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 12, 12, 24


def colour(name: str | None, names: Sequence[str]) -> str:
    """The colour of ``name`` among ``names`` (the same member, the same colour on one page);
    grey for no owner."""
    if name is None or name not in names:
        return _NONE
    return _PALETTE[names.index(name) % len(_PALETTE)]


def _clock(at: float) -> str:
    return dt.datetime.fromtimestamp(at).strftime("%H:%M:%S")


def _x(at: float, start: float, end: float) -> float:
    span = max(end - start, 1e-9)
    return _LEFT + (at - start) / span * (WIDTH - _LEFT - _RIGHT)


def lag_chart(
    series: Mapping[str, Sequence[tuple[float, int]]],
    start: float,
    end: float,
    *,
    title: str,
    height: int = 180,
) -> str:
    """Lines of lag over time, one per name of ``series`` ((time, lag) points, oldest first),
    between ``start`` and ``end`` (Unix seconds), with a legend."""
    names = sorted(series)
    top = max((lag for points in series.values() for _, lag in points), default=0)
    scale = max(top, 1)
    bottom = height - _BOTTOM

    def y(value: int) -> float:
        return bottom - value / scale * (bottom - _TOP)

    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {WIDTH} {height + 18 * len(names)}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{html.escape(title)}</title>',
        f'<line x1="{_LEFT}" y1="{bottom}" x2="{WIDTH - _RIGHT}" y2="{bottom}" class="axis"/>',
        f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{bottom}" class="axis"/>',
        f'<text x="{_LEFT - 4}" y="{_TOP + 4}" text-anchor="end">{top:,}</text>',
        f'<text x="{_LEFT - 4}" y="{bottom}" text-anchor="end">0</text>',
        f'<text x="{_LEFT}" y="{height - 6}">{_clock(start)}</text>',
        f'<text x="{WIDTH - _RIGHT}" y="{height - 6}" text-anchor="end">{_clock(end)}</text>',
    ]
    for index, name in enumerate(names):
        points = [(at, lag) for at, lag in series[name] if start <= at <= end]
        stroke = colour(name, names)
        if points:
            path = " ".join(f"{_x(at, start, end):.1f},{y(lag):.1f}" for at, lag in points)
            parts.append(f'<polyline fill="none" stroke="{stroke}" points="{path}"/>')
        last = points[-1][1] if points else 0
        legend_y = height + 18 * index + 12
        parts.append(
            f'<rect x="{_LEFT}" y="{legend_y - 9}" width="10" height="10" fill="{stroke}"/>'
            f'<text x="{_LEFT + 16}" y="{legend_y}">{html.escape(name)}: {last:,}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def timeline(
    lanes: Mapping[str, Sequence[Span]],
    owners: Sequence[str],
    start: float,
    end: float,
    *,
    title: str,
) -> str:
    """One lane per partition (its label -> its spans, oldest first), each span coloured by its
    owner among ``owners``, between ``start`` and ``end``; a legend of the owners."""
    lane = 16
    height = _TOP + lane * len(lanes) + _BOTTOM
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {WIDTH} {height + 18 * len(owners)}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{html.escape(title)}</title>',
    ]
    for number, (label, spans) in enumerate(lanes.items()):
        top = _TOP + lane * number
        parts.append(
            f'<text x="{_LEFT - 4}" y="{top + lane - 4}" text-anchor="end">'
            f"{html.escape(label)}</text>"
        )
        for span in spans:
            left = max(span.start, start)
            right = end if span.end is None else min(span.end, end)
            if right < left:
                continue
            x1, x2 = _x(left, start, end), _x(right, start, end)
            who = span.owner or "no owner"
            parts.append(
                f'<rect x="{x1:.1f}" y="{top + 1}" width="{max(x2 - x1, 1):.1f}" '
                f'height="{lane - 2}" fill="{colour(span.owner, owners)}">'
                f"<title>{html.escape(label)}: {html.escape(who)} from {_clock(span.start)}"
                "</title></rect>"
            )
    bottom = _TOP + lane * len(lanes)
    parts.append(f'<text x="{_LEFT}" y="{bottom + 16}">{_clock(start)}</text>')
    parts.append(
        f'<text x="{WIDTH - _RIGHT}" y="{bottom + 16}" text-anchor="end">{_clock(end)}</text>'
    )
    for index, owner in enumerate(owners):
        legend_y = height + 18 * index + 12
        parts.append(
            f'<rect x="{_LEFT}" y="{legend_y - 9}" width="10" height="10" '
            f'fill="{colour(owner, owners)}"/>'
            f'<text x="{_LEFT + 16}" y="{legend_y}">{html.escape(owner)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
