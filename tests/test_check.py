"""``aio-cluster check`` against the real servers: a healthy group, a stalled member, unowned
partitions and a rewound offset, each judged from samples over a window; and the rules
themselves, without servers."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from aio_cluster import ConfigurationError, ConsumerGroup
from aio_cluster.local import LocalCluster
from aio_cluster.operator.health import (
    Sample,
    Severity,
    Status,
    Thresholds,
    judge,
    parse_duration,
    verdict,
)

from conftest import MakeTopic, Produce
from support import closable
from test_cli import one_line, run, start

WINDOW = ("--window", "2s", "--samples", "3")


def member(cluster: LocalCluster, group: str, topic: str) -> ConsumerGroup:
    return ConsumerGroup(group, cluster.bootstrap, cluster.zookeeper, topic, commit_interval=0.1)


async def consume_all(group: ConsumerGroup, count: int) -> None:
    """Take ``count`` records, committing each batch as it comes."""
    taken = 0
    async with contextlib.aclosing(closable(group.batches(commit=False))) as batches:
        async for partition, batch in batches:
            await group.commit(partition, batch[-1].offset + 1)
            taken += len(batch)
            if taken == count:
                return


@pytest_asyncio.fixture
async def left_group(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, group_name: str
) -> AsyncIterator[tuple[str, str]]:
    """A group that read and committed 20 records of a 2-partition topic, then left:
    ``(group, topic)``; no member owns its partitions now."""
    topic = await make_topic(partitions=2)
    await produce(topic, 20)
    async with member(cluster, group_name, topic) as group:
        await consume_all(group, 20)
    yield group_name, topic


@pytest.mark.asyncio
async def test_a_healthy_group_is_ok(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, group_name: str
) -> None:
    topic = await make_topic(partitions=2)
    await produce(topic, 20)
    async with member(cluster, group_name, topic) as group:
        await consume_all(group, 20)
        code, out, err = await run(cluster, "check", group_name, *WINDOW, "--json")
        assert code == 0, (out, err)
        findings = json.loads(out)
        assert [(f["topic"], f["partition"], f["status"]) for f in findings] == [
            (topic, 0, "ok"),
            (topic, 1, "ok"),
        ]
        assert all(f["owner"] == group.id and f["lag"] == 0 for f in findings)
        code, out, err = await run(cluster, "check", group_name, *WINDOW)
        assert code == 0, (out, err)
        assert out.splitlines()[-1].startswith(f"ok: group {group_name}, 2 partition(s)")


@pytest.mark.asyncio
async def test_a_member_whose_body_hangs_is_stalled(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, group_name: str
) -> None:
    topic = await make_topic(partitions=2)
    counts = await produce(topic, 20)
    assert all(counts[p] for p in (0, 1))
    async with member(cluster, group_name, topic) as group:
        hang = asyncio.Event()
        took = asyncio.Event()

        async def hanging_body() -> None:
            async for _partition, _batch in group:
                took.set()
                await hang.wait()  # never set: the body hangs

        body = asyncio.create_task(hanging_body())
        try:
            await asyncio.wait_for(took.wait(), 30)
            code, out, err = await run(cluster, "check", group_name, *WINDOW)
            assert code == 2, (out, err)
            assert err == ""
            verdict_line = out.splitlines()[-1]
            assert verdict_line == (
                f"error: group {group_name}: {topic}/0 stalled, {topic}/1 stalled"
            ), out
            code, out, _err = await run(cluster, "check", group_name, *WINDOW, "--json")
            assert code == 2
            assert [(f["partition"], f["status"], f["owner"]) for f in json.loads(out)] == [
                (0, "stalled", group.id),
                (1, "stalled", group.id),
            ]
            # A threshold above the lag makes the same look a healthy one.
            code, out, err = await run(
                cluster, "check", group_name, *WINDOW, "--lag-threshold", "20"
            )
            assert code == 0, (out, err)
        finally:
            body.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await body


@pytest.mark.asyncio
async def test_partitions_nobody_owns_are_unowned(
    cluster: LocalCluster, produce: Produce, left_group: tuple[str, str]
) -> None:
    group, topic = left_group
    code, out, err = await run(cluster, "check", group, *WINDOW, "--json")
    assert code == 1, (out, err)  # nothing waits: a warning
    assert [(f["partition"], f["status"], f["severity"]) for f in json.loads(out)] == [
        (0, "unowned", "warning"),
        (1, "unowned", "warning"),
    ]
    await produce(topic, 10, start=20)
    code, out, err = await run(cluster, "check", group, *WINDOW)
    assert code == 2, (out, err)  # records wait and nobody reads them: an error
    assert out.splitlines()[-1] == f"error: group {group}: {topic}/0 unowned, {topic}/1 unowned"


@pytest.mark.asyncio
async def test_an_offset_moved_back_by_reset_offsets_is_rewound(
    cluster: LocalCluster, left_group: tuple[str, str]
) -> None:
    group, topic = left_group
    async with start(
        cluster, "check", group, "--window", "10s", "--samples", "2", "--json", "--verbose"
    ) as check:
        assert check.stderr is not None
        first = await asyncio.wait_for(check.stderr.readline(), 60)
        assert first == b"aio-cluster: sample 1 of 2 taken\n"
        code, _out, err = await run(
            cluster, "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute"
        )
        assert code == 0, err
        out, err_rest = await asyncio.wait_for(check.communicate(), 60)
    assert check.returncode == 2, (out, err_rest)
    findings = json.loads(out)
    assert [(f["partition"], f["status"], f["committed"]) for f in findings] == [
        (0, "rewound", 0),
        (1, "rewound", 0),
    ]
    assert all(f["reasons"][:2] == ["rewound", "unowned"] for f in findings)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--window", "soon"], "--window 'soon' is not a positive duration"),
        (["--window", "0s"], "is not a positive duration"),
        (["--samples", "1"], "--samples must be at least 2"),
        (["--lag-threshold", "-1"], "--lag-threshold must not be negative"),
    ],
)
async def test_bad_check_arguments_are_one_line_and_status_2(
    cluster: LocalCluster, left_group: tuple[str, str], args: list[str], message: str
) -> None:
    group, _topic = left_group
    code, out, err = await run(cluster, "check", group, *args)
    assert code == 2, (out, err)
    assert message in one_line(err)


@pytest.mark.asyncio
async def test_a_group_that_cannot_be_looked_at_is_status_2(cluster: LocalCluster) -> None:
    code, _out, err = await run(cluster, "check", "no-such-group", "--window", "1s")
    assert code == 2
    assert "group 'no-such-group' does not exist" in one_line(err)


# -- the rules, without servers ------------------------------------------------------------


def looks(*committed_lag_owner: tuple[int | None, int, str | None]) -> list[Sample]:
    return [Sample(owner, committed, lag) for committed, lag, owner in committed_lag_owner]


@pytest.mark.parametrize(
    ("samples", "thresholds", "status", "severity"),
    [
        (looks((5, 0, "m"), (5, 0, "m")), Thresholds(), Status.OK, Severity.OK),
        (looks((5, 3, "m"), (8, 0, "m")), Thresholds(), Status.OK, Severity.OK),
        (looks((5, 3, "m"), (5, 3, "m")), Thresholds(), Status.STALLED, Severity.ERROR),
        (looks((5, 3, "m"), (5, 3, "m")), Thresholds(lag=3), Status.OK, Severity.OK),
        (looks((None, 3, "m"), (None, 4, "m")), Thresholds(), Status.STALLED, Severity.ERROR),
        (
            looks((5, 3, "m"), (6, 4, "m"), (7, 6, "m")),
            Thresholds(),
            Status.LAGGING,
            Severity.WARNING,
        ),
        (looks((5, 3, "m"), (6, 4, "m"), (7, 2, "m")), Thresholds(), Status.OK, Severity.OK),
        (
            looks((5, 30, "m"), (9, 20, "m")),
            Thresholds(max_lag=10),
            Status.LAGGING,
            Severity.WARNING,
        ),
        (looks((5, 0, None), (5, 0, None)), Thresholds(), Status.UNOWNED, Severity.WARNING),
        (looks((5, 2, None), (5, 2, None)), Thresholds(), Status.UNOWNED, Severity.ERROR),
        (looks((5, 2, None), (5, 2, "m")), Thresholds(), Status.STALLED, Severity.ERROR),
        (looks((5, 0, "m"), (2, 3, "m")), Thresholds(), Status.REWOUND, Severity.ERROR),
        (looks((5, 0, None), (2, 3, None)), Thresholds(), Status.REWOUND, Severity.ERROR),
    ],
)
def test_rules(
    samples: list[Sample], thresholds: Thresholds, status: Status, severity: Severity
) -> None:
    finding = judge("t", 0, samples, thresholds)
    assert (finding.status, finding.severity) == (status, severity)
    assert verdict([finding]) is severity


def test_one_sample_is_no_verdict() -> None:
    with pytest.raises(ConfigurationError, match="two samples"):
        judge("t", 0, looks((5, 0, "m")), Thresholds())


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30.0), ("500ms", 0.5), ("2m", 120.0), ("1h", 3600.0), ("7", 7.0)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text, "--window") == seconds
