"""What exactly-once costs: a pipeline that reads an input topic of 1 KB records over 12
partitions and writes one output record per input to another topic, at least once (the group's
plain loop or ``process()``, a producer of the service's own, each output delivered before its
input's offset is stored) against exactly once (``transactions()`` and
``process_transactional()`` at the default commit interval), in the same run.

Each run is timed from the member's join until a ``read_committed`` reader of the output topic
has every output record: the time until the results are visible downstream, which is what a
pipeline's throughput means (an at-least-once output is visible once delivered, an exactly-once
one once its transaction commits). Runs alternate, at least once first, each on a fresh group
and output topic; the ratio is the median of each pair's. Goal (issue 45): exactly once at >= 0.6
of at least once.

Then the commit interval's trade: ``process_transactional()`` at several intervals, each with its
throughput on the same backlog and its latency at a steady rate (records written at ``--rate``
per second to a group that is caught up; the latency is from a record's write to its output
reaching the ``read_committed`` reader, median and 99th percentile), beside ``process()`` at
least once at the same rate.

Then the cost of one producer per claimed partition: a member claiming 200 partitions, in a
process of its own, at least once and exactly once: its peak RSS, its TCP
connections once settled, and the seconds from start to every claim taken. Results go to
``benchmarks/results/exactly-once.md``.

    python benchmarks/exactly_once.py [--records N] [--repeat R] [--rate R] [--partitions-cost P]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import anyio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from common import RESULTS, create_topic, delete_topic, fill, fresh, show
from throughput import peak_rss_mb

from aio_cluster import ConsumerGroup, Output, Record
from aio_cluster.local import LocalCluster

PARTITIONS = 12
SIZE = 1_024
INTERVALS = (0.02, 0.1, 0.5, 2.0)
"""The commit intervals of the latency section, in seconds (0.1 is the default)."""
RUN_LIMIT = 300
"""Seconds a run may take before it is called failed (a pipeline that stopped, not a slow one)."""
STEADY_SECONDS = 5
"""How long the latency runs write at their steady rate."""

Pipeline = Callable[[LocalCluster, str, str, str], Coroutine[Any, Any, None]]
"""A contender: runs a member of a fresh group from the input topic to the output topic until
cancelled."""


SENT = "sent"
"""The header of a timed input record: when it was written (an output carries its input's
headers, so the reader can tell the record's latency)."""
PROBE = "probe"
"""The header of the records that tell when a member is consuming, before the timed ones."""


async def loop_at_least_once(cluster: LocalCluster, source: str, sink: str, group: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, linger_ms=5, acks="all")
    await producer.start()
    try:
        async with ConsumerGroup(group, cluster.bootstrap, cluster.zookeeper, source) as member:
            async for _partition, batch in member:
                sent = [
                    await producer.send(
                        sink, record.value, key=record.key, headers=list(record.headers)
                    )
                    for record in batch
                ]
                await asyncio.gather(*sent)
    finally:
        await producer.stop()


async def loop_exactly_once(cluster: LocalCluster, source: str, sink: str, group: str) -> None:
    async with ConsumerGroup(
        group, cluster.bootstrap, cluster.zookeeper, source, exactly_once=True
    ) as member:
        async for _partition, batch, output in member.transactions():
            for record in batch:
                await output.send(sink, record.value, key=record.key, headers=record.headers)


async def process_at_least_once(cluster: LocalCluster, source: str, sink: str, group: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, linger_ms=5, acks="all")
    await producer.start()

    async def handler(record: Record) -> None:
        await (
            await producer.send(sink, record.value, key=record.key, headers=list(record.headers))
        )

    try:
        async with ConsumerGroup(group, cluster.bootstrap, cluster.zookeeper, source) as member:
            await member.process(handler)
    finally:
        await producer.stop()


def process_exactly_once(commit_interval: float = 0.1) -> Pipeline:
    async def pipeline(cluster: LocalCluster, source: str, sink: str, group: str) -> None:
        async def handler(record: Record, output: Output) -> None:
            await output.send(sink, record.value, key=record.key, headers=record.headers)

        async with ConsumerGroup(
            group, cluster.bootstrap, cluster.zookeeper, source, exactly_once=True
        ) as member:
            await member.process_transactional(handler, commit_interval=commit_interval)

    return pipeline


class Reader:
    """A ``read_committed`` reader of the output topic: counts what came, and each timed
    record's latency (seconds from its input's write to this reader)."""

    def __init__(self, cluster: LocalCluster, sink: str) -> None:
        self.consumer = AIOKafkaConsumer(
            sink,
            bootstrap_servers=cluster.bootstrap,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            group_id=None,
        )
        self.records = 0
        self.probes = 0
        self.latencies: list[float] = []

    async def until(self, records: int = 0, probes: int = 0) -> None:
        """Read until at least ``records`` outputs (probes not counted) and ``probes`` probes
        came."""
        while self.records < records or self.probes < probes:
            got = await self.consumer.getmany(timeout_ms=100, max_records=10_000)
            now = time.time()
            for batch in got.values():
                for record in batch:
                    headers = dict(record.headers)
                    if PROBE in headers:
                        self.probes += 1
                        continue
                    self.records += 1
                    if SENT in headers:
                        self.latencies.append(now - float(headers[SENT]))


@contextlib.asynccontextmanager
async def pipeline_running(
    cluster: LocalCluster, source: str, pipeline: Pipeline
) -> AsyncIterator[Reader]:
    """A member of a fresh group running ``pipeline`` from ``source`` to a fresh output topic,
    with that topic's reader started; the member is cancelled and the topic deleted after."""
    sink = await create_topic(cluster.bootstrap, PARTITIONS)
    reader = Reader(cluster, sink)
    await reader.consumer.start()
    member = asyncio.create_task(pipeline(cluster, source, sink, fresh("bench")))
    try:
        yield reader
    finally:
        member.cancel()
        await asyncio.gather(member, return_exceptions=True)
        await reader.consumer.stop()
        await delete_topic(cluster.bootstrap, sink)


async def run(cluster: LocalCluster, source: str, records: int, pipeline: Pipeline) -> float:
    """Seconds from a fresh member's start until the reader had the output of all ``records``
    of ``source``."""
    started = time.perf_counter()
    async with pipeline_running(cluster, source, pipeline) as reader:
        with anyio.fail_after(RUN_LIMIT):
            await reader.until(records)
    return time.perf_counter() - started


async def latencies(cluster: LocalCluster, pipeline: Pipeline, rate: int) -> list[float]:
    """The latencies of ``rate`` x `STEADY_SECONDS` records written at ``rate`` per second to a
    fresh source topic, once the member is consuming (a probe a partition came through)."""
    source = await create_topic(cluster.bootstrap, PARTITIONS)
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, linger_ms=0, acks="all")
    await producer.start()
    try:
        async with pipeline_running(cluster, source, pipeline) as reader:
            probes = 0
            while reader.probes == 0:
                for partition in range(PARTITIONS):
                    await producer.send(source, b"", partition=partition, headers=[(PROBE, b"")])
                probes += PARTITIONS
                with anyio.move_on_after(0.5):
                    await reader.until(probes=1)
            await reader.until(probes=probes)
            count = rate * STEADY_SECONDS
            # The reader reads while the records are written: a latency is read as it happens.
            with anyio.fail_after(RUN_LIMIT):
                async with anyio.create_task_group() as reading:
                    reading.start_soon(reader.until, count)
                    started = time.perf_counter()
                    for i in range(count):
                        await asyncio.sleep(max(0.0, started + i / rate - time.perf_counter()))
                        await producer.send(
                            source,
                            b"x" * SIZE,
                            key=str(i).encode(),
                            headers=[(SENT, repr(time.time()).encode())],
                        )
            return reader.latencies
    finally:
        await producer.stop()
        await delete_topic(cluster.bootstrap, source)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def throughput_section(
    cluster: LocalCluster, source: str, records: int, repeat: int
) -> tuple[list[str], list[list[str]]]:
    pairs = [
        ("async for + a producer (at least once)", "transactions() (exactly once)"),
        ("process() + a producer (at least once)", "process_transactional() (exactly once)"),
    ]
    contenders: dict[str, Pipeline] = {
        pairs[0][0]: loop_at_least_once,
        pairs[0][1]: loop_exactly_once,
        pairs[1][0]: process_at_least_once,
        pairs[1][1]: process_exactly_once(),
    }
    seconds: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeat):
        for pair in pairs:
            for name in pair:
                took = await run(cluster, source, records, contenders[name])
                seconds[name].append(took)
                print(f"{name}: {records / took:,.0f} rec/s", file=sys.stderr)
    headers = ["pipeline", "seconds", "records/s", "x at least once (paired)"]
    rows: list[list[str]] = []
    for baseline, exactly in pairs:
        for name in (baseline, exactly):
            ratios = [b / e for b, e in zip(seconds[baseline], seconds[name], strict=True)]
            took = statistics.median(seconds[name])
            rows.append(
                [name, f"{took:.3f}", f"{records / took:,.0f}", f"{statistics.median(ratios):.2f}"]
            )
    return headers, rows


async def interval_section(
    cluster: LocalCluster, source: str, records: int, rate: int
) -> tuple[list[str], list[list[str]]]:
    headers = [
        "pipeline",
        "records/s (the backlog)",
        f"latency at {rate:,} records/s, median (ms)",
        "99th percentile (ms)",
    ]
    contenders: list[tuple[str, Pipeline]] = [
        ("process() + a producer (at least once)", process_at_least_once)
    ]
    contenders += [
        (
            f"process_transactional(commit_interval={interval:g})"
            + (" (default)" if interval == 0.1 else ""),
            process_exactly_once(interval),
        )
        for interval in INTERVALS
    ]
    rows: list[list[str]] = []
    for name, pipeline in contenders:
        took = await run(cluster, source, records, pipeline)
        steady = await latencies(cluster, pipeline, rate)
        print(f"{name}: {records / took:,.0f} rec/s", file=sys.stderr)
        rows.append(
            [
                name,
                f"{records / took:,.0f}",
                f"{statistics.median(steady) * 1000:,.0f}",
                f"{percentile(steady, 0.99) * 1000:,.0f}",
            ]
        )
    return headers, rows


def sockets() -> int:
    """This process's open sockets (its TCP connections, and the event loop's own pair); a
    descriptor closed while they are counted is passed over."""
    count = 0
    for fd in Path("/proc/self/fd").iterdir():
        try:
            count += os.readlink(fd).startswith("socket:")
        except OSError:
            continue
    return count


async def claim_all(bootstrap: str, zookeeper: str, topic: str, partitions: int, mode: str) -> None:
    """The cost worker: one member takes every partition and hands out a batch of each (an
    exactly-once member starts each partition's producer as part of taking its claim); prints
    its figures as JSON."""
    started = time.perf_counter()
    exactly_once = mode == "exactly-once"
    member = ConsumerGroup(fresh("bench"), bootstrap, zookeeper, topic, exactly_once=exactly_once)
    seen: set[int] = set()
    async with member:
        if exactly_once:
            async for partition, _batch, _output in member.transactions():
                seen.add(partition)
                if len(seen) == partitions:
                    break
        else:
            async for partition, _batch in member:
                seen.add(partition)
                if len(seen) == partitions:
                    break
        settled = time.perf_counter() - started
        await asyncio.sleep(1.0)
        connections = sockets()
    print(json.dumps({"settled": settled, "sockets": connections, "rss": peak_rss_mb()}))


def cost(
    bootstrap: str, zookeeper: str, topic: str, partitions: int, mode: str
) -> dict[str, float]:
    command = [
        sys.executable,
        __file__,
        "--cost-worker",
        mode,
        "--bootstrap",
        bootstrap,
        "--zookeeper",
        zookeeper,
        "--topic",
        topic,
        "--partitions-cost",
        str(partitions),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=True)
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


async def cost_section(cluster: LocalCluster, partitions: int) -> tuple[list[str], list[list[str]]]:
    topic = await create_topic(cluster.bootstrap, partitions)
    try:
        await fill(cluster.bootstrap, topic, partitions * 10, SIZE)
        figures = {
            mode: await asyncio.to_thread(
                cost, cluster.bootstrap, cluster.zookeeper, topic, partitions, mode
            )
            for mode in ("at-least-once", "exactly-once")
        }
    finally:
        await delete_topic(cluster.bootstrap, topic)
    plain = figures["at-least-once"]
    headers = [
        f"one member, {partitions} partitions",
        "peak RSS (MB)",
        "TCP connections",
        "seconds until each partition handed out a batch",
    ]
    rows = [
        [
            mode,
            f"{figure['rss']:.0f}"
            + ("" if mode == "at-least-once" else f" (+{figure['rss'] - plain['rss']:.0f})"),
            f"{figure['sockets']:.0f}",
            f"{figure['settled']:.1f}",
        ]
        for mode, figure in figures.items()
    ]
    return headers, rows


async def main(args: argparse.Namespace) -> None:
    async with LocalCluster() as cluster:
        source = await create_topic(cluster.bootstrap, PARTITIONS)
        await fill(cluster.bootstrap, source, args.records, SIZE)
        throughput = await throughput_section(cluster, source, args.records, args.repeat)
        intervals = await interval_section(cluster, source, args.records, args.rate)
        await delete_topic(cluster.bootstrap, source)
        costs = await cost_section(cluster, args.partitions_cost)
    text = show(
        f"A pipeline: {args.records:,} input records of 1 KB over {PARTITIONS} partitions, one "
        "output record each; seconds from the join until a read_committed reader had every "
        f"output; medians of {args.repeat}, ratios paired",
        *throughput,
    )
    text += "\n" + show(
        "The commit interval: throughput on the same backlog, and the latency from an input's "
        f"write to its output reaching a read_committed reader at a steady {args.rate:,} "
        f"records/s over {STEADY_SECONDS} s",
        *intervals,
    )
    text += "\n" + show(
        "One producer per claimed partition: a member in a process of its own claiming "
        f"{args.partitions_cost} partitions",
        *costs,
    )
    command = "python benchmarks/exactly_once.py " + " ".join(sys.argv[1:])
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    when += ", load average {:.2f} {:.2f} {:.2f} at the end".format(*os.getloadavg())
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "exactly-once.md").write_text(
        f"# Exactly once\n\n`{command.strip()}`, {when}\n\n{text}"
    )


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=30_000)
    parser.add_argument("--repeat", type=int, default=3, help="pairs of runs (median)")
    parser.add_argument("--rate", type=int, default=1_000, help="records/s of the latency runs")
    parser.add_argument("--partitions-cost", type=int, default=200)
    parser.add_argument("--cost-worker", choices=["at-least-once", "exactly-once"])
    parser.add_argument("--bootstrap")
    parser.add_argument("--zookeeper")
    parser.add_argument("--topic")
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse()
    if arguments.cost_worker:
        asyncio.run(
            claim_all(
                arguments.bootstrap,
                arguments.zookeeper,
                arguments.topic,
                arguments.partitions_cost,
                arguments.cost_worker,
            )
        )
    else:
        asyncio.run(main(arguments))
