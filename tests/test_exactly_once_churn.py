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

from pipeline import EXACTLY_ONCE_OR_NOT, churn_new_pipeline

pytestmark = [pytest.mark.asyncio]

PARTITIONS = 12


@EXACTLY_ONCE_OR_NOT
async def test_pipeline_through_a_kill_a_restart_and_a_freeze(
    cluster: LocalCluster,
    admin: AIOKafkaAdminClient,
    zk: ZooKeeper,
    group_name: str,
    tmp_path: Path,
    modes: tuple[str, ...],
    exactly_once: bool,
) -> None:
    await churn_new_pipeline(
        cluster,
        admin,
        zk,
        group_name,
        tmp_path,
        modes=modes,
        exactly_once=exactly_once,
        partitions=PARTITIONS,
        records=5_000,
        faults=["kill", "restart", "freeze"],
        seed=random.randrange(2**32),
    )
