"""The dashboard's HTML: whole pages, and the fragments the event stream replaces in them by
``id``. Pure: each function takes what the last refresh recorded and returns text, every value
escaped. The page works without JavaScript (a reload shows the same); ``static/dashboard.js``
only swaps the fragments in as the event stream sends them.
"""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Mapping, Sequence
from urllib.parse import urlencode

from ..control.model import Stuck, format_at
from ..operator.health import Severity, Status, stuck_text, unreadable_text
from ..operator.plans import LagRow, PlanRow, Unreadable
from . import charts
from .controls import ControlPlan
from .history import UNOWNED, GroupHistory, LagPoint, Reachability
from .resets import TARGETS, Plan
from .views import (
    NO_OWNER,
    PAGE_SIZES,
    Filters,
    aggregate,
    member_rows,
    partition_page,
    reasons,
)

__all__ = [
    "CHART_WINDOWS",
    "control_form",
    "control_plan_page",
    "group_fragments",
    "groups_fragments",
    "message_page",
    "page",
    "plan_page",
]

CHART_WINDOWS = {"1m": 60.0, "5m": 300.0, "15m": 900.0, "1h": 3600.0}
"""The time windows the lag charts and the timeline offer."""

_SHORTEST = 60.0
"""The least time a chart spans, in seconds."""

_MEMBER_LINES = 8
"""Members drawn as lines of their own in the per-member lag chart; the rest are summed."""
_TIMELINE_LANES = 50
_REASONS_SHOWN = 20
_CHANGES_SHOWN = 30
_ERROR_SHOWN = 120
"""Characters of a stopped partition's error shown in its row (all of it in the tooltip)."""


def _e(value: object) -> str:
    return html.escape(str(value))


def _clock(at: float | None) -> str:
    return "-" if at is None else dt.datetime.fromtimestamp(at).strftime("%H:%M:%S")


def _verdict(severity: Severity | None) -> str:
    if severity is None:
        return '<span class="verdict pending">collecting</span>'
    name = severity.name.lower()
    return f'<span class="verdict {name}">{name}</span>'


def _finding(status: Status | None, severity: Severity) -> str:
    """A partition's verdict, said once: its status (``lagging``...), coloured by severity."""
    if status is None:
        return _verdict(None)
    return f'<span class="verdict {severity.name.lower()}">{status.value}</span>'


def page(title: str, root: str, body: str, events: str | None) -> str:
    """A whole page: ``body`` under the header, with the event stream at ``events`` (a URL)."""
    stream = "" if events is None else f' data-events="{_e(events)}"'
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)} - aio_cluster</title>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<link rel="stylesheet" href="{_e(root)}/static/dashboard.css">'
        f'<script defer src="{_e(root)}/static/dashboard.js"></script></head>'
        f'<body><header><a href="{_e(root)}/">aio_cluster</a> <h1>{_e(title)}</h1>'
        '<span id="live" class="live">static</span></header>'
        f"<main{stream}>{body}</main></body></html>"
    )


def status(servers: Sequence[Reachability], refreshed_at: float | None, running: bool) -> str:
    """The banner: what is down since when and why, or when the last refresh was."""
    if not running:
        return (
            '<p class="down">The dashboard is not running: enter it (<code>async with '
            "dashboard:</code>) in the lifespan of the application it is mounted in.</p>"
        )
    down = [s for s in servers if s.up is False]
    if not down:
        if refreshed_at is None:
            return '<p class="ok">Looking at the servers for the first time...</p>'
        return f'<p class="ok">ZooKeeper and Kafka answered; refreshed {_clock(refreshed_at)}.</p>'
    lines = "".join(
        f"<li><strong>{_e(s.name)} cannot be reached</strong> since {_clock(s.since)}: "
        f"{_e(s.reason)}</li>"
        for s in down
    )
    return (
        f'<div class="down"><ul>{lines}</ul><p>What is shown is as of the last look that '
        f"succeeded; trying again every refresh (last try {_clock(refreshed_at)}).</p></div>"
    )


def groups_fragments(
    histories: Mapping[str, GroupHistory], root: str, status_html: str
) -> dict[str, str]:
    """The groups page's fragments: the banner and the table of groups."""
    rows = []
    for name, history in sorted(histories.items()):
        link = f"{_e(root)}/groups/{_e(name)}"
        rows.append(
            f'<tr data-group="{_e(name)}"><td><a href="{link}">{_e(name)}</a></td>'
            f'<td class="n">{len(history.members)}</td>'
            f"<td>{_e(', '.join(history.topics()) or '-')}</td>"
            f'<td class="n lag">{history.total_lag:,}</td>'
            f"<td>{_verdict(history.verdict)}</td>"
            f"<td>{_clock(history.looked_at)}</td></tr>"
        )
    table = (
        '<table class="groups"><thead><tr><th>group</th><th>members</th><th>topics</th>'
        "<th>total lag</th><th>verdict</th><th>looked at</th></tr></thead>"
        f"<tbody>{''.join(rows) or '<tr><td colspan=6>no groups</td></tr>'}</tbody></table>"
    )
    return {"status": status_html, "groups": table}


def _series(
    points: Sequence[LagPoint], pick: str, names: Sequence[str] | None = None
) -> dict[str, list[tuple[float, int]]]:
    """Lag lines from the points: per topic, or per member (the ``names`` ones, and the others
    summed as "others")."""
    series: dict[str, list[tuple[float, int]]] = {}
    for point in points:
        values = point.by_topic if pick == "topic" else point.by_member
        if names is None:
            for name, lag in values.items():
                series.setdefault(name, []).append((point.at, lag))
            continue
        others = 0
        for name, lag in values.items():
            if name in names:
                series.setdefault(name, []).append((point.at, lag))
            else:
                others += lag
        if len(values) > len(names):
            series.setdefault("others", []).append((point.at, others))
    return series


def _cannot_read(history: GroupHistory) -> dict[str, str]:
    """member -> what it cannot read of what it owns, in one cell: ``2: since ... (broker 1,
    error)`` (the owners' marks, see docs/operating.md); members that read all are left out."""
    found: dict[str, list[str]] = {}
    for row in history.rows:
        if row.owner is not None and row.unreadable is not None:
            text = unreadable_text(row.owner, row.unreadable, row.topic, row.partition)
            found.setdefault(row.owner, []).append(
                text.removeprefix(f"{row.owner} cannot read it ")
            )
    return {member: f"{len(texts)}: {texts[0]}" for member, texts in found.items()}


def _members_html(history: GroupHistory) -> str:
    lag_by_owner = {a.name: a.lag for a in aggregate(history, "owner")}
    cannot_read = _cannot_read(history)
    rows = []
    for m in member_rows(history.group, history.members, history.claimed()):
        member = str(m["member"])
        link = f"?{urlencode({'owner': member})}"
        rows.append(
            f'<tr data-member="{_e(member)}"><td><a href="{_e(link)}">{_e(member)}</a>'
            f"{_member_stuck(history, member)}</td>"
            f"<td>{_e(m['name'] or '-')}</td><td>{_e(m['host'] or '-')}</td>"
            f"<td>{_e(m['rack'] or '-')}</td>"
            f"<td>{_e(m['strategy'] or '-')}</td>"
            f'<td class="n claimed">{_e(m["partitions"])}</td>'
            f'<td class="n">{lag_by_owner.get(member, 0):,}</td>'
            f'<td class="unreadable">{_e(cannot_read.get(member, ""))}</td>'
            f"<td>{_e(m['since'] or '-')}</td></tr>"
        )
    unowned = lag_by_owner.get(NO_OWNER)
    if unowned is not None:
        count = sum(1 for r in history.rows if r.owner is None)
        rows.append(
            f'<tr class="unowned"><td><a href="?owner={NO_OWNER}">{UNOWNED}</a></td>'
            f'<td></td><td></td><td></td><td></td><td class="n">{count}</td>'
            f'<td class="n">{unowned:,}</td><td></td><td></td></tr>'
        )
    return (
        f"<h2>Members ({len(history.members)})</h2>"
        '<table class="members"><thead><tr><th>member</th><th>name</th><th>host</th>'
        "<th>rack</th><th>strategy</th><th>partitions</th><th>lag</th><th>cannot read</th>"
        "<th>joined at</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _summary_html(history: GroupHistory, window: float) -> str:
    counts, worst = reasons(history.findings, _REASONS_SHOWN)
    by_status = ", ".join(f"{count} {status.value}" for status, count in counts.items())
    items = "".join(
        f'<li data-status="{f.status.value}">{_e(f.topic)}/{f.partition}: '
        f"<strong>{f.status.value}</strong> ({f.severity.name.lower()}; "
        f"{_e(', '.join(r.value for r in f.reasons))}), lag {f.last.lag:,}, owner "
        f"{_e(f.last.owner or 'none')}</li>"
        for f in worst
    )
    notes = "".join(f"<li>{_e(note)}</li>" for note in history.notes)
    topics = "".join(
        f'<tr><td><a href="?{_e(urlencode({"topic": a.name}))}">{_e(a.name)}</a></td>'
        f'<td class="n">{a.partitions:,}</td><td class="n">{a.lag:,}</td>'
        f"<td>{_verdict(a.worst)}</td></tr>"
        for a in aggregate(history, "topic")
    )
    return (
        f'<p class="headline">Verdict {_verdict(history.verdict)} over the last {window:g} s '
        f'(the rules of <code>aio-cluster check</code>); total lag <strong id="total-lag">'
        f"{history.total_lag:,}</strong>; {len(history.rows):,} partitions; looked at "
        f"{_clock(history.looked_at)}.</p>"
        + (f"<p>{_e(by_status)}:</p><ul class=reasons>{items}</ul>" if items else "")
        + (f"<ul class=notes>{notes}</ul>" if notes else "")
        + '<table class="topics"><thead><tr><th>topic</th><th>partitions</th><th>lag</th>'
        f"<th>worst</th></tr></thead><tbody>{topics}</tbody></table>"
    )


def _start(span: float, now: float, first: float | None) -> float:
    """Where a chart begins: the window's start, or the first look when the dashboard has
    watched for less than the window (a chart of a minute's looks is not squeezed into the
    right edge of an hour), a minute at least."""
    start = now - span
    if first is None:
        return start
    return min(max(start, first), now - _SHORTEST)


def _charts_html(history: GroupHistory, span: float, now: float) -> str:
    points = list(history.points)
    start = _start(span, now, points[0].at if points else None)
    latest = points[-1].by_member if points else {}
    top = sorted(latest, key=lambda m: (-latest[m], m))[:_MEMBER_LINES]
    by_topic = charts.lag_chart(_series(points, "topic"), start, now, title="lag per topic")
    by_member = charts.lag_chart(_series(points, "member", top), start, now, title="lag per member")
    windows = " ".join(
        f'<a href="?{_e(urlencode({"window": key}))}">{key}</a>' for key in CHART_WINDOWS
    )
    return (
        f"<h2>Lag over time</h2><p>window: {windows}</p>"
        f'<div class="charts"><figure>{by_topic}<figcaption>per topic</figcaption></figure>'
        f"<figure>{by_member}<figcaption>per member</figcaption></figure></div>"
    )


def _when(by: str, at: float) -> str:
    return f'by {_e(by)} at <time title="{format_at(at)}">{_clock(at)}</time>'


def _stuck_badge(stuck: Stuck, seconds: float) -> str:
    """A partition whose handler or batch body has run past its member's ``stuck_after``: how
    long, in which member, on which record."""
    return (
        f'<span class="badge stuck" title="{_e(stuck_text(stuck, seconds))}">stuck '
        f'{seconds:.0f}s</span> <span class="record">{_e(stuck.kind)} of offset '
        f"{stuck.offset:,} ({_e(stuck.member)})</span>"
    )


def _member_stuck(history: GroupHistory, member: str) -> str:
    """A badge beside a member one of whose handlers or batch bodies has run past its
    ``stuck_after``: the longest, and how many partitions ("" when none)."""
    mine = [row for row in history.rows if row.stuck is not None and row.stuck.member == member]
    if not mine:
        return ""
    longest = max(row.stuck_for for row in mine)
    return (
        f' <span class="badge stuck" title="{len(mine)} partition(s) stuck">stuck '
        f"{longest:.0f}s</span>"
    )


def _controls_html(row: LagRow, writes: bool) -> str:
    """A partition's operator controls: its paused badge (who, when), the record it is stopped
    on, a skip pending; and, where writes are allowed, the buttons that plan a change."""
    paused, stopped, skip = row.paused, row.stopped, row.skip
    shown = []
    if paused is not None:
        shown.append(
            f'<span class="badge paused">paused</span> <span class="who">'
            f"{_when(paused.by, paused.at)}</span>"
        )
    if stopped is not None:
        error = stopped.error[:_ERROR_SHOWN] + ("..." if len(stopped.error) > _ERROR_SHOWN else "")
        shown.append(
            f'<span class="badge stopped">stopped</span> <span class="record" '
            f'title="{_e(stopped.error)}">on offset {stopped.offset:,}: {_e(error)} '
            f"({_e(stopped.member)}, at {_clock(stopped.at)})</span>"
        )
    if row.stuck is not None:
        shown.append(_stuck_badge(row.stuck, row.stuck_for))
    if skip is not None:
        shown.append(
            f'<span class="badge skip">skip to {skip.target} pending</span> '
            f'<span class="who">{_when(skip.by, skip.at)}</span>'
        )
    if writes:
        target = f"{row.topic}:{row.partition}"
        act = "resume" if paused is not None else "pause"
        shown.append(
            f'<span class="acts"><button form="control-form" name="act" value="{act}:'
            f'{_e(target)}" class="act {act}">{act}</button> <button form="control-form" '
            f'name="act" value="skip:{_e(target)}" class="act skip">skip</button></span>'
        )
    return " ".join(shown)


def _partitions_html(history: GroupHistory, filters: Filters, writes: bool) -> str:
    shown = partition_page(history, filters)
    rows = "".join(
        f'<tr data-partition="{_e(r.row.topic)}/{r.row.partition}"><td>{_e(r.row.topic)}</td>'
        f'<td class="n">{r.row.partition}</td><td class="owner">{_e(r.row.owner or "-")}</td>'
        f'<td class="n">{"-" if r.row.committed is None else f"{r.row.committed:,}"}</td>'
        f'<td class="n">{r.row.end:,}</td><td class="n lag">{r.row.lag:,}</td>'
        f"<td>{_finding(r.status, r.severity)}</td>"
        f'<td class="control">{_controls_html(r.row, writes)}</td></tr>'
        for r in shown.rows
    )
    nav = []
    if shown.page > 1:
        nav.append(f'<a href="?{_e(urlencode(filters.query(page=shown.page - 1)))}">previous</a>')
    nav.append(f"page {shown.page} of {shown.pages} ({shown.matching:,} partitions)")
    if shown.page < shown.pages:
        nav.append(f'<a href="?{_e(urlencode(filters.query(page=shown.page + 1)))}">next</a>')
    return (
        f"<h2>Partitions</h2><p class=pager>{' '.join(nav)}</p>"
        '<table class="partitions"><thead><tr><th>topic</th><th>partition</th><th>owner</th>'
        "<th>stored offset</th><th>log end</th><th>lag</th><th>verdict</th><th>control</th>"
        "</tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


def _filters_form(history: GroupHistory, filters: Filters, window: str) -> str:
    def options(values: Sequence[str], chosen: str, blank: str) -> str:
        shown = [f'<option value="">{blank}</option>']
        shown += [
            f'<option value="{_e(v)}"{" selected" if v == chosen else ""}>{_e(v)}</option>'
            for v in values
        ]
        return "".join(shown)

    owners = [*sorted(history.members), NO_OWNER]
    statuses = [s.value for s in Status]
    sizes = "".join(
        f"<option{' selected' if s == filters.size else ''}>{s}</option>" for s in PAGE_SIZES
    )
    return (
        '<form class="filters" method="get">'
        f'<label>topic <select name="topic">{options(history.topics(), filters.topic, "all")}'
        f'</select></label> <label>owner <select name="owner">'
        f"{options(owners, filters.owner, 'all')}</select></label> "
        f'<label>verdict <select name="status">{options(statuses, filters.status, "all")}'
        f'</select></label> <label>rows <select name="size">{sizes}</select></label>'
        f'<input type="hidden" name="window" value="{_e(window)}">'
        ' <button type="submit">show</button></form>'
    )


def _timeline_html(history: GroupHistory, filters: Filters, span: float, now: float) -> str:
    shown = partition_page(history, filters).rows[:_TIMELINE_LANES]
    keys = sorted((r.row.topic, r.row.partition) for r in shown)
    spans = history.spans(keys)
    several = len({topic for topic, _ in keys}) > 1
    lanes = {(f"{t}/{p}" if several else str(p)): spans[(t, p)] for t, p in keys}
    owners = sorted({s.owner for lane in lanes.values() for s in lane if s.owner is not None})
    first = min((lane[0].start for lane in lanes.values() if lane), default=None)
    drawing = charts.timeline(
        lanes, owners, _start(span, now, first), now, title="owner of each partition"
    )
    changes = [
        c
        for c in reversed(history.changes)
        if (not filters.topic or c.topic == filters.topic)
        and (not filters.owner or filters.owner in (c.before or NO_OWNER, c.after or NO_OWNER))
    ][:_CHANGES_SHOWN]
    items = "".join(
        f'<li data-change="{_e(c.topic)}/{c.partition}">{_clock(c.at)} {_e(c.topic)}/'
        f"{c.partition}: {_e(c.before or 'no owner')} &rarr; {_e(c.after or 'no owner')}</li>"
        for c in changes
    )
    return (
        "<h2>Ownership timeline</h2><p>The partitions of this page (at most "
        f"{_TIMELINE_LANES}), coloured by owner; grey: no owner.</p>{drawing}"
        f"<h3>Latest owner changes</h3><ol class=changes>{items or '<li>none yet</li>'}</ol>"
    )


def _events_html(history: GroupHistory) -> str:
    """The newest operator controls of the group, newest first."""
    items = "".join(
        f'<li data-action="{_e(e.action)}" data-partition="{_e(e.topic)}/{e.partition}">'
        f'<time title="{format_at(e.at)}">{_clock(e.at)}</time> <strong>{_e(e.action)}</strong> '
        f"{_e(e.topic)}/{e.partition} by {_e(e.by)}{': ' + _e(e.detail) if e.detail else ''}</li>"
        for e in history.events
    )
    return (
        "<h2>Pauses, resumes and skips</h2><p>The newest first, as written to ZooKeeper by "
        "<code>aio-cluster pause</code>, <code>resume</code>, <code>skip</code>, a dashboard, "
        f"or a member applying a skip.</p><ol class=events>{items or '<li>none</li>'}</ol>"
    )


def group_fragments(
    history: GroupHistory,
    filters: Filters,
    window: str,
    now: float,
    status_html: str,
    writes: bool,
) -> dict[str, str]:
    """A group page's fragments, by element id (``window`` is a key of `CHART_WINDOWS`); with
    ``writes``, the partitions have their pause, resume and skip buttons."""
    span = CHART_WINDOWS.get(window, CHART_WINDOWS["5m"])
    return {
        "status": status_html,
        "summary": _summary_html(history, history.window),
        "members": _members_html(history),
        "charts": _charts_html(history, span, now),
        "partitions": _partitions_html(history, filters, writes),
        "events": _events_html(history),
        "timeline": _timeline_html(history, filters, span, now),
    }


def group_body(
    history: GroupHistory,
    filters: Filters,
    window: str,
    fragments: Mapping[str, str],
    forms: Mapping[str, str],
) -> str:
    """The body of a group page around its fragments; ``forms`` are the HTML of the control
    form (``"control"``, the partitions' buttons submit it) and the reset form (``"reset"``),
    which the event stream leaves alone (a token typed in stays)."""

    def sections(*keys: str) -> str:
        return "".join(f'<section id="{key}">{fragments[key]}</section>' for key in keys)

    return (
        sections("status", "summary", "members", "charts")
        + _filters_form(history, filters, window)
        + f'<section id="control">{forms["control"]}</section>'
        + sections("partitions", "events", "timeline")
        + f'<section id="reset">{forms["reset"]}</section>'
    )


def control_form(group: str, root: str, writes: bool) -> str:
    """The form the partitions' pause, resume and skip buttons submit (its token, a skip's
    offset), or why there are no buttons (read-only)."""
    if not writes:
        return (
            "<p>Read-only: pause, resume and skip need a dashboard started with "
            "<code>--allow-writes</code>.</p>"
        )
    return (
        f'<form id="control-form" method="post" action="{_e(root)}/groups/{_e(group)}/control"'
        ' class="control"><label>token <input type="password" name="token" autocomplete="off">'
        '</label> <label>skip to offset <input name="to_offset" size="12" '
        'placeholder="past the stopped record"></label></form><p class="hint">The pause, '
        "resume and skip buttons of the partitions plan first, as <code>aio-cluster skip</code> "
        "does; nothing is written before you apply the plan shown.</p>"
    )


def reset_form(group: str, topics: Sequence[str], root: str, writes: bool) -> str:
    """The form that plans a reset, or why there is none (read-only)."""
    if not writes:
        return (
            "<h2>Reset offsets</h2><p>Read-only: this dashboard was started without "
            "<code>--allow-writes</code>.</p>"
        )
    topic_options = "".join(f"<option>{_e(t)}</option>" for t in topics)
    targets = "".join(f'<option value="{k}">{_e(v)}</option>' for k, v in TARGETS.items())
    return (
        "<h2>Reset offsets</h2><p>Plans first, as <code>aio-cluster reset-offsets</code> does; "
        "nothing is stored before you store the plan shown.</p>"
        f'<form method="post" action="{_e(root)}/groups/{_e(group)}/reset" class="reset">'
        f'<label>topic <select name="topic">{topic_options}</select></label> '
        f'<label>to <select name="target">{targets}</select></label> '
        '<label>N or time <input name="value" size="24"></label> '
        '<label>partitions <input name="partitions" placeholder="all, or 0,3" size="10"></label> '
        '<label>token <input type="password" name="token" autocomplete="off"></label> '
        '<button type="submit">plan</button></form>'
    )


def _old(row: PlanRow) -> str:
    if isinstance(row.old, Unreadable):
        return f"unreadable {row.old.data[:40]!r}"
    return "-" if row.old is None else f"{row.old:,}"


def plan_page(plan: Plan, root: str) -> str:
    """The body showing a plan, and the form that stores it."""
    rows = "".join(
        f'<tr data-partition="{row.partition}"><td class="n">{row.partition}</td>'
        f'<td class="n">{_old(row)}</td><td class="n new">{row.new:,}</td></tr>'
        for row in plan.rows
    )
    registered = (
        f"<p class=warning>{len(plan.registered)} member(s) registered for this topic: they "
        "would overwrite the new offsets. Stop them first, or force it.</p>"
        if plan.registered
        else ""
    )
    return (
        f"<h2>Plan: reset {_e(plan.group)} / {_e(plan.topic)}</h2>"
        '<table class="plan"><thead><tr><th>partition</th><th>stored now</th><th>new</th>'
        f"</tr></thead><tbody>{rows}</tbody></table>{registered}"
        f'<form method="post" action="{_e(root)}/groups/{_e(plan.group)}/reset/{_e(plan.id)}">'
        '<label>token <input type="password" name="token" autocomplete="off"></label> '
        '<label><input type="checkbox" name="force" value="1"> even while members are '
        'registered</label> <button type="submit" name="store" value="1">store this plan'
        f'</button></form><p><a href="{_e(root)}/groups/{_e(plan.group)}">back</a></p>'
    )


def _effect(plan: ControlPlan) -> str:
    """What applying ``plan`` does, in words."""
    request, row = plan.request, plan.row
    where = f"{_e(request.topic)}/{request.partition}"
    if request.act == "pause":
        return (
            f"Every member stops handing out records of {where} within one batch; its claim, "
            "stored offset and fetch position stay, on whichever member owns it, until resumed."
        )
    if request.act == "resume":
        still = (
            f" It stays stopped on offset {plan.row.stopped.offset:,} by <code>on_failure="
            '"stop"</code> until that record is skipped.'
            if plan.row.stopped is not None
            else ""
        )
        return f"The members hand out records of {where} again.{still}"
    target = "?" if plan.target is None else f"{plan.target:,}"
    skipped = (
        ""
        if row.committed is None or plan.target is None
        else f" ({plan.target - row.committed:,} record(s) from offset {row.committed:,})"
    )
    return (
        f"The owner, {_e(row.owner or 'none')}, moves {where} to offset {target} at its next "
        f"batch boundary, fenced by its claim: the records before it are never handled"
        f"{skipped}. A member with a dead-letter topic sends the record it is stopped on there, "
        "saying who skipped it and when."
    )


def control_plan_page(plan: ControlPlan, root: str) -> str:
    """The body showing a pause, resume or skip planned, and the form that applies it."""
    request, row = plan.request, plan.row
    where = f"{_e(request.topic)}/{request.partition}"
    facts = [
        ("partition", where),
        ("owner", _e(row.owner or "none")),
        ("stored offset", "-" if row.committed is None else f"{row.committed:,}"),
        ("log end", f"{row.end:,}"),
        ("lag", f"{row.lag:,}"),
        (
            "paused",
            "no" if plan.row.paused is None else _when(plan.row.paused.by, plan.row.paused.at),
        ),
    ]
    if plan.row.stopped is not None:
        stopped = plan.row.stopped
        facts.append(
            (
                "stopped on",
                f"offset {stopped.offset:,} by {_e(stopped.member)} at {_clock(stopped.at)}: "
                f"{_e(stopped.error)}",
            )
        )
    if plan.target is not None:
        facts.append(("skip to", f"{plan.target:,}"))
    table = "".join(f'<tr class="{_e(k)}"><th>{_e(k)}</th><td>{v}</td></tr>' for k, v in facts)
    back = f"{_e(root)}/groups/{_e(plan.group)}"
    return (
        f"<h2>Plan: {_e(request.act)} {where} of {_e(plan.group)}</h2>"
        f'<table class="plan control-plan"><tbody>{table}</tbody></table>'
        f'<p class="effect">{_effect(plan)}</p>'
        f'<form method="post" action="{back}/control/{_e(plan.id)}">'
        '<label>token <input type="password" name="token" autocomplete="off"></label> '
        f'<button type="submit" name="apply" value="1">{_e(request.act)} {where}</button>'
        f'</form><p><a href="{back}">back</a></p>'
    )


def message_page(text: str, back: str, *, error: bool) -> str:
    """A body of one message and a link back."""
    kind = "down" if error else "ok"
    return f'<p class="{kind}">{_e(text)}</p><p><a href="{_e(back)}">back</a></p>'
