"""The short variant of the exactly-once chaos test (``tests/chaos/test_exactly_once_chaos.py``),
in the default suite: three pipeline member processes on an input topic of 12 partitions while
5,000 numbered records are fed; one member is SIGKILLed and another started, the named one is
SIGKILLed and started again under its name, and one is frozen (SIGSTOP) past its session and
thawed. With ``exactly_once`` the output read with ``read_committed`` holds each input once;
members that write at least once write some twice (the check can fail)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper

from pipeline import churn_pipeline
from support import add_topic

pytestmark = [pytest.mark.asyncio]

PARTITIONS = 12


@pytest.mark.parametrize(
    ("modes", "exactly_once"),
    [
        (("transactions", "process"), True),
        (("plain", "plain-process"), False),
    ],
    ids=["exactly-once", "at-least-once"],
)
async def test_pipeline_through_a_kill_a_restart_and_a_freeze(
    cluster: LocalCluster,
    admin: AIOKafkaAdminClient,
    zk: ZooKeeper,
    group_name: str,
    tmp_path: Path,
    modes: tuple[str, ...],
    exactly_once: bool,
) -> None:
    seed = random.randrange(2**32)
    source = await add_topic(admin, PARTITIONS, prefix="input")
    sink = await add_topic(admin, PARTITIONS, prefix="output")
    churned = await churn_pipeline(
        cluster,
        zk,
        source,
        sink,
        group_name,
        tmp_path,
        modes=modes,
        partitions=PARTITIONS,
        records=5_000,
        faults=["kill", "restart", "freeze"],
        seed=seed,
        chunk=50,
    )
    print(churned.summary())
    assert not churned.missing, f"inputs without output: {churned.missing[:10]} (seed {seed})"
    if exactly_once:
        twice = list(churned.duplicates.items())[:5]
        assert not churned.duplicates, f"inputs written twice (seed {seed}): {twice}"
    else:
        assert churned.duplicates, f"at least once wrote no input twice (seed {seed})"
