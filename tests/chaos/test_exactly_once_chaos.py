"""Exactly-once through chaos: three pipeline member processes read an input topic of 12
partitions while 30,000 numbered records are fed, and write one output record per input to
another topic, while members are SIGKILLed and started again (one named member under its name,
before its session expired), one is frozen (SIGSTOP) past its session and thawed, members join
and leave gracefully, and one member's ZooKeeper traffic is cut past its session (see
`pipeline.churn_pipeline`). Every kind of fault happens at least once, in an order the seed
shuffles, then random ones up to ``AIO_CLUSTER_CHAOS_ROUNDS`` (default 12).

With ``exactly_once`` (members in turn on ``transactions()`` and ``process_transactional()``)
the output read with ``read_committed`` holds each input exactly once. The same scenario with
members that write at least once (a producer of their own beside ``async for`` and
``process()``) shows duplicates: the check can fail.

Long by design: it runs in the chaos session (``nox -s chaos``); ``AIO_CLUSTER_CHAOS_SEED`` sets
the seed (printed). ``tests/test_exactly_once_churn.py`` is the short variant of the default
suite.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper

from pipeline import EXACTLY_ONCE_OR_NOT, FAULTS, Fault, churn_new_pipeline

pytestmark = [pytest.mark.asyncio, pytest.mark.chaos, pytest.mark.timeout(900)]

PARTITIONS = 12
RECORDS = 30_000


def schedule(rng: random.Random, rounds: int) -> list[Fault]:
    """Every kind of fault once, shuffled, then random ones up to ``rounds``."""
    faults = list(FAULTS)
    rng.shuffle(faults)
    faults += [rng.choice(FAULTS) for _ in range(rounds - len(faults))]
    return faults


@EXACTLY_ONCE_OR_NOT
async def test_pipeline_through_kills_freezes_cuts_joins_and_leaves(
    cluster: LocalCluster,
    admin: AIOKafkaAdminClient,
    zk: ZooKeeper,
    group_name: str,
    tmp_path: Path,
    modes: tuple[str, ...],
    exactly_once: bool,
) -> None:
    rounds = int(os.environ.get("AIO_CLUSTER_CHAOS_ROUNDS", "12"))
    seed = int(os.environ.get("AIO_CLUSTER_CHAOS_SEED", str(random.randrange(2**32))))
    await churn_new_pipeline(
        cluster,
        admin,
        zk,
        group_name,
        tmp_path,
        modes=modes,
        exactly_once=exactly_once,
        partitions=PARTITIONS,
        records=RECORDS,
        faults=schedule(random.Random(seed), rounds),
        seed=seed,
    )
