"""The dashboard's pause, resume and skip, without servers: what the buttons ask, what a plan
refuses, what the partitions table and the control history show, and that each partition's
verdict is said once."""

from __future__ import annotations

import re

import pytest

from aio_cluster.control.model import ControlEvent, Pause, Skip, Stopped
from aio_cluster.dashboard.controls import ControlPlan, Request, parse_request, refusal
from aio_cluster.dashboard.history import GroupHistory
from aio_cluster.dashboard.pages import control_form, control_plan_page, group_fragments
from aio_cluster.dashboard.views import Filters
from aio_cluster.errors import (
    ConfigurationError,
    ControlConflictError,
    SkipRefusedError,
)
from aio_cluster.operator.plans import LagRow

PAUSE = Pause("t", 0, "alice@ops", 1_700_000_000.0)
STOPPED = Stopped("t", 1, "g-box-1-2-3", 41, "ValueError: <bad> record", 1_700_000_001.0)
SKIP = Skip("t", 2, 50, None, "bob@ops", 1_700_000_002.0)


def row(
    partition: int,
    *,
    owner: str | None = "g-box-1-2-3",
    paused: Pause | None = None,
    stopped: Stopped | None = None,
    skip: Skip | None = None,
) -> LagRow:
    """Partition ``partition`` of topic t: stored offset 40, log end 60."""
    return LagRow("t", partition, owner, 40, 60, 20, paused, stopped, skip)


def history() -> GroupHistory:
    """Partitions 0 paused, 1 stopped on offset 41, 2 waiting for a skip, 3 stalled, 4 caught
    up; looked at twice, so that each has a verdict."""
    caught_up = LagRow("t", 4, "g-box-1-2-3", 60, 60, 0)
    looked = [row(0, paused=PAUSE), row(1, stopped=STOPPED), row(2, skip=SKIP), row(3), caught_up]
    found = GroupHistory("g", keep=60.0, window=10.0)
    found.record(0.0, {}, looked)
    found.record(1.0, {}, looked)
    found.record_events(
        [
            ControlEvent(1_700_000_003.0, "dashboard 10.0.0.1", "resume", "t", 5, "paused by x"),
            ControlEvent(1_700_000_000.0, "alice@ops", "pause", "t", 0),
        ]
    )
    return found


@pytest.mark.parametrize(
    ("form", "request_"),
    [
        ({"act": "pause:t:0"}, Request("pause", "t", 0)),
        ({"act": "resume:my.topic-1:12", "to_offset": "9"}, Request("resume", "my.topic-1", 12)),
        ({"act": "skip:t:3", "to_offset": ""}, Request("skip", "t", 3)),
        ({"act": "skip:t:3", "to_offset": " 77 "}, Request("skip", "t", 3, 77)),
    ],
)
def test_a_button_asks_for_one_act_on_one_partition(
    form: dict[str, str], request_: Request
) -> None:
    assert parse_request(form) == request_


@pytest.mark.parametrize(
    "form",
    [
        {},
        {"act": "delete:t:0"},
        {"act": "pause:t"},
        {"act": "pause::0"},
        {"act": "pause:t:x"},
        {"act": "skip:t:0", "to_offset": "-1"},
        {"act": "skip:t:0", "to_offset": "ten"},
    ],
)
def test_a_request_that_makes_no_sense_is_refused(form: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError):
        parse_request(form)


def test_a_plan_refuses_what_the_store_would_refuse() -> None:
    assert refusal(Request("pause", "t", 3), row(3)) is None
    assert isinstance(refusal(Request("pause", "t", 0), row(0, paused=PAUSE)), ControlConflictError)
    assert refusal(Request("resume", "t", 0), row(0, paused=PAUSE)) is None
    assert isinstance(refusal(Request("resume", "t", 3), row(3)), ControlConflictError)
    stopped = row(1, stopped=STOPPED)
    assert refusal(Request("skip", "t", 1), stopped) is None
    assert refusal(Request("skip", "t", 1, 45), stopped) is None
    refused = {
        "a skip pending": refusal(Request("skip", "t", 2, 55), row(2, skip=SKIP)),
        "nobody owns it": refusal(Request("skip", "t", 1), row(1, owner=None, stopped=STOPPED)),
        "not stopped, no offset": refusal(Request("skip", "t", 3), row(3)),
        "backwards": refusal(Request("skip", "t", 3, 40), row(3)),
        "not past the stop": refusal(Request("skip", "t", 1, 41), stopped),
        "past the log end": refusal(Request("skip", "t", 3, 61), row(3)),
    }
    assert isinstance(refused.pop("a skip pending"), ControlConflictError)
    assert all(isinstance(why, SkipRefusedError) for why in refused.values()), refused


def test_the_partitions_table_shows_pauses_stops_and_skips_and_the_verdict_once() -> None:
    fragments = group_fragments(history(), Filters(), "5m", 2.0, "", writes=False)
    table = fragments["partitions"]
    cells = dict(re.findall(r'<tr data-partition="t/(\d)">(.*?)</tr>', table))
    assert "paused" in cells["0"]
    assert "by alice@ops at" in cells["0"]
    assert "on offset 41: ValueError: &lt;bad&gt; record" in cells["1"]
    assert "skip to 50 pending" in cells["2"]
    assert "by bob@ops" in cells["2"]
    verdicts = {
        p: re.findall(r'class="verdict [a-z]+">([a-z]+)<', cell) for p, cell in cells.items()
    }
    assert verdicts == {
        "0": ["paused"],
        "1": ["stopped"],
        "2": ["stalled"],
        "3": ["stalled"],
        "4": ["ok"],
    }
    assert ">ok ok<" not in table
    assert "<button" not in table, "read-only: no buttons"
    events = fragments["events"]
    assert events.index('data-action="resume"') < events.index('data-action="pause"'), (
        "newest first"
    )
    assert "by dashboard 10.0.0.1: paused by x" in events


def test_with_writes_each_partition_has_its_buttons() -> None:
    table = group_fragments(history(), Filters(), "5m", 2.0, "", writes=True)["partitions"]
    buttons = re.findall(r'<button form="control-form" name="act" value="([^"]+)"', table)
    assert sorted(buttons) == [
        "pause:t:1",
        "pause:t:2",
        "pause:t:3",
        "pause:t:4",
        "resume:t:0",
        "skip:t:0",
        "skip:t:1",
        "skip:t:2",
        "skip:t:3",
        "skip:t:4",
    ]
    form = control_form("g", "/root", writes=True)
    assert 'id="control-form"' in form
    assert 'action="/root/groups/g/control"' in form
    assert 'name="token"' in form
    assert "<form" not in control_form("g", "/root", writes=False)


def test_a_skip_plan_says_which_record_who_owns_it_and_where_it_goes() -> None:
    plan = ControlPlan("abc", "g", Request("skip", "t", 1), row(1, stopped=STOPPED))
    assert plan.target == 42
    shown = control_plan_page(plan, "")
    assert "offset 41 by g-box-1-2-3" in shown
    assert "ValueError: &lt;bad&gt; record" in shown
    assert "The owner, g-box-1-2-3, moves t/1 to offset 42" in shown
    assert 'action="/groups/g/control/abc"' in shown
    assert 'name="token"' in shown
    paused = ControlPlan("d", "g", Request("resume", "t", 0), row(0, paused=PAUSE))
    assert paused.target is None
    assert "by alice@ops at" in control_plan_page(paused, "")
