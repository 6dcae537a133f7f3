"""One member's memory over many partitions with a backlog: peak RSS and throughput of an
aio_cluster member (its default budget of buffered bytes, and without a budget) against raw
aiokafka in assign() mode, in the same run.

Every contender reads the same backlog (``--messages`` records of ``--size`` bytes over
``--partitions`` partitions) from the start to the end in a process of its own, so its peak RSS
is its own; the rounds alternate the order. Throughput counts as ``throughput.py``'s read-only
rate (from the read that returned the first records to the last). Ratios are to raw aiokafka's
medians of the same run. Targets (issue 20): with the default budget, one member over 200
partitions of 1 KB records peaks at <= 100 MB RSS, at >= 0.95 of raw aiokafka's throughput.
Results go to ``benchmarks/results/memory.md``.

    python benchmarks/memory.py [--messages N] [--size BYTES] [--partitions P] [--rounds R]
                                [--warmup W]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable

from common import RESULTS, create_topic, fill, fresh, markdown_table, median
from rich.console import Console
from rich.table import Table
from throughput import (
    Clock,
    Run,
    add_worker_options,
    dispatch,
    measure,
    peak_rss_mb,
    raw_aiokafka,
)

from aio_cluster.local import LocalCluster


async def budgeted(run: Run, clock: Clock) -> None:
    from aio_cluster import ConsumerGroup  # noqa: PLC0415 (only its own client, for its RSS)

    async with ConsumerGroup(fresh("bench"), run.bootstrap, run.zookeeper, run.topic) as group:
        clock.add(0)
        async for _partition, batch in group:
            if clock.add(len(batch)):
                break


async def unbounded(run: Run, clock: Clock) -> None:
    from aio_cluster import ConsumerGroup  # noqa: PLC0415 (only its own client, for its RSS)

    async with ConsumerGroup(
        fresh("bench"), run.bootstrap, run.zookeeper, run.topic, max_buffered_bytes=None
    ) as group:
        clock.add(0)
        async for _partition, batch in group:
            if clock.add(len(batch)):
                break


async def raw_shared(run: Run, clock: Clock) -> None:
    """Raw aiokafka with the fetch sizes the default budget gives a member of these partitions:
    what the budget costs Kafka's side, apart from the member's own work."""
    from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: PLC0415 (only its own client)

    from aio_cluster.config import DEFAULT_BUFFERED_BYTES  # noqa: PLC0415

    consumer = AIOKafkaConsumer(
        bootstrap_servers=run.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_bytes=DEFAULT_BUFFERED_BYTES // 4,
        max_partition_fetch_bytes=1_048_576,
    )
    await consumer.start()
    try:
        tps = [TopicPartition(run.topic, p) for p in range(run.partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        clock.add(0)
        while not clock.add(sum(len(r) for r in (await consumer.getmany(timeout_ms=100)).values())):
            pass
    finally:
        await consumer.stop()


CONTENDERS: dict[str, tuple[str, Callable[[Run, Clock], Awaitable[None]]]] = {
    "raw": ("aiokafka assign() (baseline)", raw_aiokafka),
    "default": ("aio_cluster, default budget", budgeted),
    "unbounded": ("aio_cluster, max_buffered_bytes=None", unbounded),
    "raw_shared": ("aiokafka assign(), the budget's fetch sizes", raw_shared),
}


def worker(name: str, run: Run) -> None:
    """Run one contender in this process and print its figures as one JSON line."""
    clock = Clock(run.total)
    asyncio.run(CONTENDERS[name][1](run, clock))
    print(json.dumps({"rate": clock.read_rate(), "rss_mb": peak_rss_mb()}))


async def main(args: argparse.Namespace) -> None:
    # A fresh topic's leaders come a moment after its metadata: the producer's retries are noise.
    logging.basicConfig(level=logging.ERROR)
    names = list(CONTENDERS)
    figures: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    loads = []
    async with LocalCluster() as cluster:
        topic = await create_topic(cluster.bootstrap, args.partitions)
        # Batches of 64 KB: with 1 MB batches over 200 partitions one produce request would
        # pass the broker's 100 MB request limit.
        await fill(cluster.bootstrap, topic, args.messages, args.size, batch_size=65_536)
        run = Run(cluster.bootstrap, cluster.zookeeper, topic, args.partitions, args.messages)
        # The broker's first reads of a fresh topic are slower (its JIT, the page cache): each
        # contender reads it once first, not counted, so that no round's order favours one.
        for _ in range(args.warmup):
            for name in names:
                result = await asyncio.to_thread(measure, name, run, args.timeout, __file__)
                print(f"warm-up {name}: {result}", file=sys.stderr)
        for round_ in range(args.rounds):
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                loads.append(os.getloadavg()[0])
                result = await asyncio.to_thread(measure, name, run, args.timeout, __file__)
                print(f"round {round_ + 1} {name}: {result}", file=sys.stderr)
                if result is not None:
                    figures[name].append(result)
    report(args, figures, median(loads))


def report(
    args: argparse.Namespace, figures: dict[str, list[dict[str, float]]], load: float
) -> None:
    base_rate = median([f["rate"] for f in figures["raw"]])
    base_rss = median([f["rss_mb"] for f in figures["raw"]])
    headers = ["consumer", "peak RSS MB", "RSS ratio", "msg/s", "throughput ratio", "runs"]
    rows = []
    for name, (label, _run) in CONTENDERS.items():
        runs = figures[name]
        if not runs:
            rows.append([label, "-", "-", "-", "-", f"0 of {args.rounds}"])
            continue
        rss = median([f["rss_mb"] for f in runs])
        rate = median([f["rate"] for f in runs])
        rows.append(
            [
                label,
                f"{rss:.0f}",
                f"{rss / base_rss:.2f}",
                f"{rate:,.0f}",
                f"{rate / base_rate:.2f}",
                f"{len(runs)} of {args.rounds}",
            ]
        )
    title = (
        f"{args.messages:,} records of {args.size} B on {args.partitions} partitions, "
        f"{args.rounds} alternating rounds after {args.warmup} uncounted, medians, "
        f"load average {load:.1f}"
    )
    table = Table(*headers, title=title)
    for row in rows:
        table.add_row(*row)
    Console().print(table)
    print("targets: the default budget's peak RSS <= 100 MB, throughput ratio >= 0.95")
    command = "python benchmarks/memory.py " + " ".join(sys.argv[1:])
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "memory.md").write_text(
        f"# Memory\n\n{title}.\n\n`{command.strip()}`, {when}\n\n"
        + markdown_table(headers, rows)
        + "\n\nTargets: the default budget's peak RSS <= 100 MB, throughput ratio >= 0.95.\n"
    )


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    # 600,000 records: a run of about 2.5 s. At 200,000 (under a second) the rates swung by a
    # third between rounds of the same contender, and the ratio with them.
    parser.add_argument("--messages", type=int, default=600_000)
    parser.add_argument("--size", type=int, default=1_000)
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--warmup", type=int, default=1, help="uncounted reads by each contender first"
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per contender run")
    add_worker_options(parser, CONTENDERS)
    return parser.parse_args()


if __name__ == "__main__":
    dispatch(parse(), worker, main)
