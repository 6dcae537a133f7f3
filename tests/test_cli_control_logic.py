"""The rules of ``aio-cluster pause``, ``resume`` and ``skip`` and of ``check``'s paused and
stopped verdicts, without servers: which partitions are named, a skip's plan and its refusals."""

from __future__ import annotations

import re

import pytest

from aio_cluster import ConfigurationError, ControlConflictError, SkipRefusedError
from aio_cluster.control.model import Controls, Pause, Skip, Stopped
from aio_cluster.operator.controls import plan_skip, select_keys
from aio_cluster.operator.health import Sample, Severity, Status, Thresholds, judge
from aio_cluster.operator.plans import lag_rows

PAUSE = Pause("t", 1, "ops@host", 1_780_000_000.0)
STOP = Stopped("t", 1, "m1", 42, "ValueError: bad record", 1_780_000_000.0)


def test_select_keys_takes_every_partition_or_the_wanted_ones_of_each_topic() -> None:
    found = {"a": [0, 1, 2], "b": [0, 1]}
    assert select_keys(found, None) == [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)]
    assert select_keys(found, [1, 0]) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]


def test_select_keys_names_every_topic_without_a_wanted_partition() -> None:
    with pytest.raises(ConfigurationError) as caught:
        select_keys({"a": [0, 1, 2], "b": [0, 1]}, [2, 7])
    assert str(caught.value) == (
        "topic a has no partition 7 (it has 0-2); topic b has no partition 2, 7 (it has 0-1)"
    )


def test_a_skip_of_a_stopped_partition_goes_just_past_its_record() -> None:
    plan = plan_skip(("t", 1), "m1", 40, (0, 100), STOP, None, None)
    assert (plan.start, plan.target, plan.skipped) == (42, 43, 1)
    assert plan.lines()[1] == "t/1 is stopped on offset 42 (ValueError: bad record)"
    assert plan.as_json(requested=False)["stopped"] == {
        "member": "m1",
        "offset": 42,
        "error": "ValueError: bad record",
        "at": "2026-05-28T20:26:40Z",
    }


def test_a_skip_to_an_offset_starts_at_the_stored_one_or_the_earliest() -> None:
    assert plan_skip(("t", 0), "m1", 40, (0, 100), None, None, 50).skipped == 10
    assert plan_skip(("t", 0), "m1", None, (30, 100), None, None, 50).start == 30
    assert plan_skip(("t", 0), "m1", 90, (0, 100), None, None, 100).skipped == 10  # to the end


@pytest.mark.parametrize(
    ("owner", "committed", "stopped", "to_offset", "says"),
    [
        (None, 40, STOP, None, "nobody owns t/1"),
        ("m1", 40, None, None, "not stopped on a record"),
        ("m1", 40, None, 40, "not past offset 40"),
        ("m1", 40, None, 12, "not past offset 40"),
        ("m1", 40, STOP, 42, "not past offset 42"),
        ("m1", 40, None, 101, "past the log end of t/1 (100)"),
    ],
)
def test_a_skip_is_refused_where_it_cannot_be_applied(
    owner: str | None, committed: int, stopped: Stopped | None, to_offset: int | None, says: str
) -> None:
    with pytest.raises(SkipRefusedError, match=re.escape(says)):
        plan_skip(("t", 1), owner, committed, (0, 100), stopped, None, to_offset)


def test_a_pending_skip_is_a_conflict() -> None:
    pending = Skip("t", 1, 50, None, "other@host", 1_780_000_000.0)
    with pytest.raises(ControlConflictError, match=r"pending already \(by other@host"):
        plan_skip(("t", 1), "m1", 40, (0, 100), STOP, pending, 60)


def test_rows_carry_the_controls_of_their_partition_into_json_and_samples() -> None:
    controls = Controls(paused={("t", 1): PAUSE}, stopped={("t", 1): STOP})
    rows = lag_rows("t", {0: "m1", 1: "m1"}, {0: 5, 1: 42}, {0: (0, 5), 1: (0, 50)}, controls)
    assert rows[0].as_json()["paused"] is None
    assert rows[1].as_json()["paused"] == {"by": "ops@host", "at": "2026-05-28T20:26:40Z"}
    assert rows[1].as_json()["stopped"]["offset"] == 42  # type: ignore[index]
    assert rows[1].control_text() == (
        "paused by ops@host at 2026-05-28T20:26:40Z; stopped on offset 42 (ValueError: bad record)"
    )
    assert rows[1].sample() == Sample("m1", 42, 8, PAUSE, STOP)
    assert rows[0].control_text() == ""


def looks(count: int, **held: object) -> list[Sample]:
    """``count`` samples of a partition whose offset never moves, its lag 10."""
    return [Sample("m1", 5, 10, **held)] * count  # type: ignore[arg-type]


def test_a_paused_partition_is_paused_never_stalled_or_lagging() -> None:
    found = judge("t", 1, looks(3, paused=PAUSE), Thresholds(max_lag=1))
    assert (found.status, found.severity, found.reasons) == (
        Status.PAUSED,
        Severity.WARNING,
        (Status.PAUSED,),
    )
    assert found.detail() == "paused by ops@host at 2026-05-28T20:26:40Z"
    assert judge("t", 1, looks(3), Thresholds()).status is Status.STALLED


def test_a_pause_lifted_during_the_window_leaves_the_partition_ok() -> None:
    samples = [Sample("m1", 5, 10, PAUSE), Sample("m1", 5, 10)]
    assert judge("t", 1, samples, Thresholds()).status is Status.OK


def test_a_stopped_partition_is_an_error_that_names_its_record() -> None:
    found = judge("t", 1, looks(2, stopped=STOP, paused=PAUSE), Thresholds())
    assert (found.status, found.severity) == (Status.STOPPED, Severity.ERROR)
    assert found.reasons == (Status.STOPPED, Status.PAUSED)
    assert found.detail() == "stopped on offset 42 (ValueError: bad record)"
    assert found.as_json()["stopped"] == {
        "member": "m1",
        "offset": 42,
        "error": "ValueError: bad record",
        "at": "2026-05-28T20:26:40Z",
    }
