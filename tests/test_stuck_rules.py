"""The ``stuck`` verdict's rule, its mark's JSON and the dashboard's badges, without servers."""

from __future__ import annotations

import pytest

from aio_cluster.control.model import Stuck, decode_stuck, encode_stuck
from aio_cluster.dashboard.history import GroupHistory
from aio_cluster.dashboard.pages import group_fragments
from aio_cluster.dashboard.views import Filters
from aio_cluster.errors import CoordinationError
from aio_cluster.operator.health import Sample, Severity, Status, Thresholds, judge, stuck_text
from aio_cluster.operator.plans import LagRow
from aio_cluster.zookeeper.layout import Registration

MARK = Stuck("t", 3, "m-1", "handler", 42, 1_700_000_000.0)


def test_a_stuck_mark_reads_back_as_written() -> None:
    assert decode_stuck("t", 3, encode_stuck(MARK)) == MARK


@pytest.mark.parametrize(
    "data",
    [
        b"nope",
        b'{"member":"m","kind":"sleeping","offset":1,"since":1}',
        b'{"member":"m","kind":"body","offset":-1,"since":1}',
    ],
)
def test_a_stuck_mark_that_is_not_one_is_refused(data: bytes) -> None:
    with pytest.raises(CoordinationError, match="stuck mark t/3"):
        decode_stuck("t", 3, data)


def test_a_partition_stuck_in_the_last_sample_is_stuck_naming_member_and_time() -> None:
    samples = [
        Sample("m-1", 10, 5),
        Sample("m-1", 10, 5, stuck=MARK, stuck_for=95.4),
    ]
    finding = judge("t", 3, samples, Thresholds())
    assert finding.status is Status.STUCK
    assert finding.severity is Severity.ERROR
    assert finding.reasons == (Status.STUCK, Status.STALLED)
    assert finding.detail() == "stuck for 95s in member m-1 (the handler of offset 42)"
    assert finding.as_json()["stuck"] == {
        "member": "m-1",
        "kind": "handler",
        "offset": 42,
        "since": "2023-11-14T22:13:20Z",
        "seconds": 95.4,
    }


def test_a_stuck_body_is_named_as_a_body() -> None:
    body = Stuck("t", 0, "m-2", "body", 7, 0.0)
    assert stuck_text(body, 61.0) == (
        "stuck for 61s in member m-2 (the loop body of the batch at offset 7)"
    )


def test_a_mark_gone_by_the_last_sample_is_no_longer_stuck() -> None:
    samples = [Sample("m-1", 10, 0, stuck=MARK, stuck_for=70.0), Sample("m-1", 11, 0)]
    assert judge("t", 3, samples, Thresholds()).status is Status.OK


def test_the_dashboard_shows_a_stuck_partition_and_its_member() -> None:
    history = GroupHistory("g", keep=60.0, window=10.0)
    members = {"m-1": Registration(("t",), since_ms=1), "m-2": Registration(("t",), since_ms=1)}
    looks = [
        LagRow("t", 3, "m-1", 10, 15, 5, stuck=MARK, stuck_for=95.0),
        LagRow("t", 4, "m-2", 10, 10, 0),
    ]
    history.record(0.0, members, looks)
    history.record(1.0, members, looks)
    fragments = group_fragments(history, Filters(), "5m", 2.0, "", writes=False)
    (stuck_row,) = [
        row for row in fragments["partitions"].split("<tr") if 'data-partition="t/3"' in row
    ]
    assert '<span class="badge stuck"' in stuck_row
    assert "stuck 95s" in stuck_row
    assert "handler of offset 42 (m-1)" in stuck_row
    assert '<span class="verdict error">stuck</span>' in stuck_row, "the verdict says stuck"
    members_table = fragments["members"]
    (first,) = [row for row in members_table.split("<tr") if 'data-member="m-1"' in row]
    (second,) = [row for row in members_table.split("<tr") if 'data-member="m-2"' in row]
    assert "stuck 95s" in first
    assert "stuck" not in second
