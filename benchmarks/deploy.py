"""A rolling restart, with and without named members: what moves, what repeats, what pauses.

Four members ("pods") own a topic of 12 partitions while a producer writes to every partition
steadily. Each pod in turn is closed (gracefully, as a Deployment's rollout stops it), is away for
``--away`` seconds (the restart), and starts again: under the same ``member_name`` with a
``rejoin_grace`` in the named run, as a fresh member in the baseline run (today's default). A
ZooKeeper client samples the owner nodes every 50 ms. Reported per run:

- **owner changes**: how often a partition's owner became another pod than the one before
  (goal with names: 0; without, each stop spreads its partitions and each start takes some back);
- **delivered twice**: records handed out more than once;
- **longest pause**: the longest time between two deliveries of one partition, while the producer
  wrote to it every ``--interval`` seconds;
- **rollout**: seconds from the first stop to the last pod settled.

The chart (``results/deploy.png``) draws each partition's owner over time in both runs.

    python benchmarks/deploy.py [--away 1.0] [--interval 0.05] [--grace 30]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import logging
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone

import anyio
from aiokafka import AIOKafkaProducer
from common import RESULTS, create_topic, fresh, markdown_table, table

from aio_cluster import ConsumerGroup
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import NoNodeError, ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

PODS = 4
PARTITIONS = 12


@dataclass
class Run:
    """What one rollout measured."""

    label: str
    samples: list[tuple[float, dict[int, str]]] = field(default_factory=list)
    """(seconds since the rollout began, partition -> owning pod) every 50 ms."""
    deliveries: dict[int, list[float]] = field(default_factory=dict)
    """partition -> the times its records were handed out."""
    seen: Counter[tuple[int, int]] = field(default_factory=Counter)
    """(partition, offset) -> times handed out."""
    began: float = 0.0
    """When the first pod was stopped (the group had settled before)."""
    rollout: float = 0.0

    def owner_changes(self) -> int:
        """Owner changes from the group settled before the rollout to the end."""
        during = [s for t, s in self.samples if t >= self.began]
        changes = 0
        for partition in range(PARTITIONS):
            owners = [s[partition] for s in during if partition in s]
            changes += sum(1 for a, b in itertools.pairwise(owners) if a != b)
        return changes

    def twice(self) -> int:
        return sum(count - 1 for count in self.seen.values() if count > 1)

    def longest_pause(self) -> float:
        gaps = [b - a for times in self.deliveries.values() for a, b in itertools.pairwise(times)]
        return max(gaps, default=0.0)


async def rollout(cluster: LocalCluster, topic: str, named: bool, args: argparse.Namespace) -> Run:
    """Run the pods, restart each in turn, and measure."""
    run = Run("named members" if named else "unnamed members (baseline)")
    group_name = fresh("deploy")
    layout = GroupLayout(group_name, topic)
    begun = time.perf_counter()
    pod_of: dict[str, str] = {}
    """member id -> pod (an unnamed member's id changes at each start; its pod does not)."""

    def start(pod: str) -> ConsumerGroup:
        options: dict[str, object] = {}
        if named:
            options = {"member_name": pod, "rejoin_grace": args.grace}
        group = ConsumerGroup(
            group_name,
            cluster.bootstrap,
            cluster.zookeeper,
            topic,
            loop_delay=0.02,
            max_wait=0.02,
            commit_interval=0.2,
            **options,  # type: ignore[arg-type]
        )
        pod_of[group.id] = pod
        return group

    async def consume(group: ConsumerGroup) -> None:
        async for partition, batch in group:
            now = time.perf_counter() - begun
            run.deliveries.setdefault(partition, []).append(now)
            run.seen.update((partition, record.offset) for record in batch)

    async def sample(zk: ZooKeeper) -> None:
        while True:
            owners: dict[int, str] = {}
            for partition in range(PARTITIONS):
                with contextlib.suppress(NoNodeError):
                    data, _stat = await zk.get(layout.owner(partition))
                    owners[partition] = pod_of.get(data.decode(), data.decode())
            run.samples.append((time.perf_counter() - begun, owners))
            await asyncio.sleep(0.05)

    async def settled() -> None:
        while True:
            last = run.samples[-1][1] if run.samples else {}
            if len(last) == PARTITIONS and len(set(last.values())) == PODS:
                return
            await asyncio.sleep(0.05)

    async def produce(producer: AIOKafkaProducer) -> None:
        while True:
            for partition in range(PARTITIONS):
                await producer.send(topic, value=b"x", partition=partition)
            await asyncio.sleep(args.interval)

    zk = ZooKeeper(cluster.zookeeper)
    await zk.start()
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, linger_ms=5)
    await producer.start()
    pods = {f"pod-{i}": start(f"pod-{i}") for i in range(PODS)}
    tasks: dict[str, asyncio.Task[None]] = {}
    background = [asyncio.ensure_future(sample(zk)), asyncio.ensure_future(produce(producer))]
    try:
        for pod, group in pods.items():
            await group.register()
            tasks[pod] = asyncio.ensure_future(consume(group))
        with anyio.fail_after(60):
            await settled()
        await asyncio.sleep(1.0)
        first_stop = time.perf_counter()
        run.began = first_stop - begun
        for pod in list(pods):
            await pods[pod].close()
            await tasks.pop(pod)
            await asyncio.sleep(args.away)
            pods[pod] = start(pod)
            await pods[pod].register()
            tasks[pod] = asyncio.ensure_future(consume(pods[pod]))
            with anyio.fail_after(60):
                await settled()
        run.rollout = time.perf_counter() - first_stop
        await asyncio.sleep(1.0)
    finally:
        for group in pods.values():
            await group.close()
        for task in [*tasks.values(), *background]:
            task.cancel()
        await asyncio.gather(*tasks.values(), *background, return_exceptions=True)
        await producer.stop()
        await zk.close()
    return run


def chart(runs: list[Run]) -> None:
    """Each partition's owner over time, one panel per run."""
    import matplotlib  # noqa: PLC0415 (the bench extra)

    matplotlib.use("Agg")
    from matplotlib import pyplot  # noqa: PLC0415

    colours = {f"pod-{i}": c for i, c in enumerate(["#4a7ab5", "#d9822b", "#3f9e4d", "#b54a6f"])}
    figure, panels = pyplot.subplots(len(runs), 1, figsize=(10, 3.2 * len(runs)), sharex=True)
    for axes, run in zip(panels, runs, strict=True):
        for partition in range(PARTITIONS):
            for (t0, s0), (t1, _s1) in itertools.pairwise(run.samples):
                owner = s0.get(partition)
                if owner is not None:
                    axes.broken_barh([(t0, t1 - t0)], (partition - 0.4, 0.8), color=colours[owner])
        axes.axvline(run.began, color="black", linewidth=0.8, linestyle="--")
        axes.set_title(
            f"{run.label}: {run.owner_changes()} owner changes after the rollout began (dashed)",
            fontsize=9,
        )
        axes.set_ylabel("partition")
        axes.set_yticks(range(PARTITIONS))
    panels[-1].set_xlabel("seconds (white: nobody owns the partition)")
    handles = [matplotlib.patches.Patch(color=c, label=p) for p, c in colours.items()]
    figure.legend(handles=handles, loc="upper right", fontsize=8)
    figure.tight_layout()
    figure.savefig(RESULTS / "deploy.png", dpi=100)
    pyplot.close(figure)


async def main(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.ERROR)
    async with LocalCluster() as cluster:
        topic = await create_topic(cluster.bootstrap, PARTITIONS)
        runs = [await rollout(cluster, topic, named, args) for named in (False, True)]
    headers = ["members", "owner changes", "delivered twice", "longest pause s", "rollout s"]
    rows = [
        [
            run.label,
            run.owner_changes(),
            run.twice(),
            f"{run.longest_pause():.2f}",
            f"{run.rollout:.1f}",
        ]
        for run in runs
    ]
    base, named = runs
    ratio = [
        "ratio named / baseline",
        _ratio(named.owner_changes(), base.owner_changes()),
        "",
        "",
        "",
    ]
    print(table(headers, [*rows, ratio]))
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "deploy.md").write_text(
        "# A rolling restart\n\n"
        f"{PODS} members over {PARTITIONS} partitions, each closed, away {args.away} s and "
        f"started again in turn, a record to every partition every {args.interval} s; named "
        f"members with rejoin_grace={args.grace}. Load average {os.getloadavg()[0]:.1f}.\n\n"
        f"`python benchmarks/deploy.py`, {stamp}\n\n"
        f"{markdown_table(headers, rows)}\n\n"
        "Goal: 0 owner changes with names. The longest pause with names is a pod's own restart "
        "(its partitions wait for it); without names it is the moves' handovers.\n\n"
        "![ownership](deploy.png)\n"
    )
    chart(runs)


def _ratio(a: int, b: int) -> str:
    return f"{a / b:.2f}" if b else "n/a"


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--away", type=float, default=1.0, help="seconds a pod is down")
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between writes")
    parser.add_argument("--grace", type=float, default=30.0, help="the named run's rejoin_grace")
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse()))
