"""One member's consuming throughput against raw aiokafka in assign() mode and the peers' group
consumers, in the same run.

Every contender reads the same topic from the start to the end in a process of its own, so its
CPU seconds and peak RSS are its own; the rounds alternate the contenders' order so that none gets
a warmer broker. Throughput counts what a user waits for: from the consumer's creation (its start,
its join or assignment included) to the end of its close, every contender alike; the client's
import is not counted. The read-only rate beside it counts from the start of the read that
returned the first records to the one that returned the last, and the close column from there to
the close's end. CPU counts from the consumer's creation to its close. The ratio is to the median
of the raw aiokafka baseline of the same run (the paired ratio is the median of each round's
ratio to that round's baseline); the targets are >= 0.95 for aio_cluster and >= every peer's
group consumer. Results go to ``benchmarks/results/throughput.md`` and ``throughput.png`` (with
the contenders' and, when not the defaults, the shape's names in the file's name).

    python benchmarks/throughput.py [--messages N] [--size BYTES] [--partitions P] [--rounds R]
        [--contenders NAME,...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import resource
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from common import (
    RESULTS,
    bar_chart,
    create_topic,
    fill,
    fresh,
    markdown_table,
    median,
    table,
    worker_addresses,
)

from aio_cluster.local import LocalCluster

DEFAULT_SHAPE = (300_000, 100, 4)
"""The messages, their size in bytes and the partitions a run reads unless told otherwise."""


@dataclass
class Run:
    bootstrap: str
    zookeeper: str
    topic: str
    partitions: int
    total: int


class Clock:
    """What a user waits for, from the consumer's creation (`open`) to the end of its close
    (`closed`), and within it the reading alone: from the start of the read that returned the
    first records to the one that returned the last."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.seen = 0
        self.opened_at = 0.0
        self.first_at = 0.0
        self.last_at = 0.0
        self.closed_at = 0.0
        self.asked_at = time.perf_counter()

    def open(self) -> None:
        """The consumer is about to be created: the user's wait starts (the import is done)."""
        self.opened_at = self.asked_at = time.perf_counter()

    def add(self, count: int) -> bool:
        """Count a read's records; True once all arrived. The next read starts now."""
        if count and not self.seen:
            self.first_at = self.asked_at
        self.seen += count
        self.asked_at = time.perf_counter()
        if self.seen >= self.total and not self.last_at:
            self.last_at = self.asked_at
        return self.seen >= self.total

    def closed(self) -> None:
        """The consumer's close returned: the user's wait ends."""
        self.closed_at = time.perf_counter()

    def read_rate(self) -> float:
        """Records a second over the reading alone, the start and the close left out."""
        return self.seen / ((self.last_at or time.perf_counter()) - self.first_at)

    def figures(self) -> dict[str, float]:
        """Records a second over the user's wait (``rate``) and over the reading alone
        (``read_rate``), and the seconds from the last records read to the close's end."""
        return {
            "rate": self.seen / (self.closed_at - self.opened_at),
            "read_rate": self.read_rate(),
            "close_s": self.closed_at - self.last_at,
        }


async def raw_aiokafka(run: Run, clock: Clock) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: PLC0415 (only its own client, for its RSS)

    clock.open()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=run.bootstrap, group_id=None, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = [TopicPartition(run.topic, p) for p in range(run.partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        clock.add(0)  # assigned: the first read starts here
        while not clock.add(sum(len(r) for r in (await consumer.getmany(timeout_ms=100)).values())):
            pass
    finally:
        await consumer.stop()
        clock.closed()


async def aiokafka_group(run: Run, clock: Clock) -> None:
    from aiokafka import AIOKafkaConsumer  # noqa: PLC0415 (only its own client, for its RSS)

    clock.open()
    consumer = AIOKafkaConsumer(
        run.topic,
        bootstrap_servers=run.bootstrap,
        group_id=fresh("bench"),
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        while not clock.add(sum(len(r) for r in (await consumer.getmany(timeout_ms=100)).values())):
            pass
    finally:
        await consumer.stop()
        clock.closed()


async def aio_cluster_group(run: Run, clock: Clock) -> None:
    from aio_cluster import ConsumerGroup  # noqa: PLC0415 (only its own client, for its RSS)

    clock.open()
    async with ConsumerGroup(fresh("bench"), run.bootstrap, run.zookeeper, run.topic) as group:
        clock.add(0)  # joined: the first read starts here
        async for _partition, batch in group:
            if clock.add(len(batch)):
                break
    clock.closed()


def _confluent_config(run: Run) -> dict[str, object]:
    return {
        "bootstrap.servers": run.bootstrap,
        "group.id": fresh("bench"),
        "auto.offset.reset": "earliest",
    }


async def confluent_sync(run: Run, clock: Clock) -> None:
    from confluent_kafka import Consumer  # noqa: PLC0415 (only its own client, for its RSS)

    clock.open()
    consumer = Consumer(_confluent_config(run))
    consumer.subscribe([run.topic])
    try:
        while not clock.add(
            sum(1 for m in consumer.consume(num_messages=10_000, timeout=0.1) if not m.error())
        ):
            pass
    finally:
        consumer.close()
        clock.closed()


async def confluent_assign(run: Run, clock: Clock) -> None:
    """librdkafka's fetch as a member would drive it, under ZooKeeper's coordination: the
    partitions assigned from given offsets (here the beginning), no Kafka group: the prototype
    of an optional librdkafka data path."""
    from confluent_kafka import (  # noqa: PLC0415 (only its own client, for its RSS)
        OFFSET_BEGINNING,
        Consumer,
        TopicPartition,
    )

    clock.open()
    # librdkafka wants a group.id even unsubscribed; nothing is committed to it.
    consumer = Consumer(
        {
            "bootstrap.servers": run.bootstrap,
            "group.id": fresh("bench"),
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(run.topic, p, OFFSET_BEGINNING) for p in range(run.partitions)])
    try:
        clock.add(0)  # assigned: the first read starts here
        while not clock.add(
            sum(1 for m in consumer.consume(num_messages=10_000, timeout=0.1) if not m.error())
        ):
            pass
    finally:
        consumer.close()
        clock.closed()


async def confluent_aio(run: Run, clock: Clock) -> None:
    from confluent_kafka.aio import AIOConsumer  # noqa: PLC0415 (only its own client, for its RSS)

    clock.open()
    consumer = AIOConsumer(_confluent_config(run))
    await consumer.subscribe([run.topic])
    try:
        while not clock.add(
            sum(
                1 for m in await consumer.consume(num_messages=10_000, timeout=0.1) if not m.error()
            )
        ):
            pass
    finally:
        await consumer.close()
        clock.closed()


async def kafka_python(run: Run, clock: Clock) -> None:
    from kafka import KafkaConsumer  # noqa: PLC0415 (only its own client, for its RSS)

    clock.open()
    consumer = KafkaConsumer(
        run.topic,
        bootstrap_servers=run.bootstrap,
        group_id=fresh("bench"),
        auto_offset_reset="earliest",
    )
    try:
        while not clock.add(
            sum(len(r) for r in consumer.poll(timeout_ms=100, max_records=10_000).values())
        ):
            pass
    finally:
        consumer.close()
        clock.closed()


CONTENDERS: dict[str, tuple[str, Callable[[Run, Clock], Awaitable[None]]]] = {
    "raw": ("aiokafka assign() (baseline)", raw_aiokafka),
    "aio_cluster": ("aio_cluster ConsumerGroup", aio_cluster_group),
    "aiokafka": ("aiokafka group", aiokafka_group),
    "confluent": ("confluent-kafka Consumer group", confluent_sync),
    "confluent_aio": ("confluent-kafka AIOConsumer group", confluent_aio),
    "confluent_assign": ("confluent-kafka Consumer assign()", confluent_assign),
    "kafka_python": ("kafka-python group", kafka_python),
}


def worker(name: str, run: Run) -> None:
    """Run one contender in this process and print its figures as one JSON line."""
    logging.basicConfig(level=logging.ERROR)  # heartbeat chatter is not the result
    clock = Clock(run.total)
    before = resource.getrusage(resource.RUSAGE_SELF)
    asyncio.run(CONTENDERS[name][1](run, clock))
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(json.dumps({**clock.figures(), "cpu": cpu, "rss_mb": peak_rss_mb()}))


def peak_rss_mb() -> float:
    """This process's peak resident set. Not ``ru_maxrss``: Linux carries that over ``exec``
    from the parent, so every contender would report at least the controller's peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(name: str, run: Run, timeout: float, script: str = __file__) -> dict[str, float] | None:
    """One contender's figures, measured by ``script --worker NAME`` in a process of its own, or
    None when it failed or did not finish in ``timeout`` seconds (reported, so that one stuck
    peer does not void the others' rounds)."""
    command = [
        sys.executable,
        script,
        "--worker",
        name,
        "--bootstrap",
        run.bootstrap,
        "--zookeeper",
        run.zookeeper,
        "--topic",
        run.topic,
        "--partitions",
        str(run.partitions),
        "--messages",
        str(run.total),
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        print(f"{name}: no result within {timeout:g}s", file=sys.stderr)
        return None
    if done.returncode:
        print(f"{name} failed:\n{done.stderr[-2000:]}", file=sys.stderr)
        return None
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


async def prepare(cluster: LocalCluster, args: argparse.Namespace) -> Run:
    topic = await create_topic(cluster.bootstrap, args.partitions)
    await fill(cluster.bootstrap, topic, args.messages, args.size)
    return Run(cluster.bootstrap, cluster.zookeeper, topic, args.partitions, args.messages)


async def main(args: argparse.Namespace) -> None:
    names = args.contenders.split(",")
    unknown = set(names) - set(CONTENDERS)
    if unknown or names[0] != "raw":
        raise SystemExit(f"contenders: raw first, then any of {', '.join(CONTENDERS)}")
    figures: dict[str, list[dict[str, float] | None]] = {name: [] for name in names}
    async with LocalCluster() as cluster:
        run = await prepare(cluster, args)
        for round_ in range(args.rounds):
            shift = round_ % len(names)  # alternate who goes first
            for name in names[shift:] + names[:shift]:
                figures[name].append(await asyncio.to_thread(measure, name, run, args.timeout))
                print(f"round {round_ + 1} {name}: {figures[name][-1]}", file=sys.stderr)
    report(args, names, figures)


def report(
    args: argparse.Namespace, names: list[str], results: dict[str, list[dict[str, float] | None]]
) -> None:
    figures = {name: [f for f in runs if f is not None] for name, runs in results.items()}
    base = median([f["rate"] for f in figures["raw"]])
    headers = [
        "consumer",
        "msg/s (median)",
        "min",
        "max",
        "ratio",
        "paired ratio",
        "read-only msg/s",
        "read-only paired ratio",
        "close s",
        "CPU s",
        "CPU s per M records",
        "peak RSS MB",
        "runs failed",
    ]
    rows = []
    for contender in names:
        rates = [f["rate"] for f in figures[contender]]
        if not rates:
            failed = f"{len(results[contender])} of {len(results[contender])}"
            rows.append([CONTENDERS[contender][0], *["-"] * (len(headers) - 2), failed])
            continue
        rows.append(
            [
                CONTENDERS[contender][0],
                f"{median(rates):,.0f}",
                f"{min(rates):,.0f}",
                f"{max(rates):,.0f}",
                f"{median(rates) / base:.2f}",
                f"{paired(results[contender], results['raw']):.2f}",
                f"{median([f['read_rate'] for f in figures[contender]]):,.0f}",
                f"{paired(results[contender], results['raw'], 'read_rate'):.2f}",
                f"{median([f['close_s'] for f in figures[contender]]):.3f}",
                f"{median([f['cpu'] for f in figures[contender]]):.2f}",
                f"{cpu_per_million(figures[contender], args.messages):.2f}",
                f"{median([f['rss_mb'] for f in figures[contender]]):.0f}",
                f"{results[contender].count(None)} of {len(results[contender])}",
            ]
        )
    title = (
        f"{args.messages:,} messages of {args.size} B on {args.partitions} partitions, "
        f"{args.rounds} alternating rounds, medians, one process per contender; msg/s from the "
        "consumer's creation to the end of its close (its start, join and close included), "
        "read-only msg/s from the first records read to the last, close s from the last "
        "records read to the close's end"
    )
    versus = cpu_versus_librdkafka(figures, args.messages)
    print(title)
    print(table(headers, rows))
    if versus:
        print(versus)
    command = "python benchmarks/throughput.py " + " ".join(sys.argv[1:])
    RESULTS.mkdir(exist_ok=True)
    name = result_name(args, names)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = os.getloadavg()[0]
    (RESULTS / f"{name}.md").write_text(
        f"# Throughput\n\n{title}.\n\n`{command.strip()}`, {when}, load average {load:.1f}\n\n"
        + markdown_table(headers, rows)
        + (f"\n{versus}\n" if versus else "\n")
    )
    bar_chart(
        RESULTS / f"{name}.png",
        [CONTENDERS[contender][0] for contender in names],
        [median([f["rate"] for f in figures[contender]] or [0.0]) for contender in names],
        "msg/s (median)",
        title,
    )


def result_name(args: argparse.Namespace, names: list[str]) -> str:
    """``throughput``, then the contenders when not all ran, then the shape
    (``<messages>x<size>Bx<partitions>p``) when it is not the default, so that runs of other
    shapes do not overwrite each other's results."""
    name = "throughput" if names == list(CONTENDERS) else "throughput-" + "-".join(names)
    shape = (args.messages, args.size, args.partitions)
    if shape != DEFAULT_SHAPE:
        name += f"-{args.messages}x{args.size}Bx{args.partitions}p"
    return name


def cpu_per_million(runs: list[dict[str, float]], messages: int) -> float:
    """A contender's median CPU seconds (its creation to its close, the join included) per
    million records read."""
    return median([f["cpu"] for f in runs]) / messages * 1_000_000


def cpu_versus_librdkafka(figures: dict[str, list[dict[str, float]]], messages: int) -> str:
    """The member's CPU per record against librdkafka's (confluent-kafka's Consumer), in a
    sentence; empty when either did not run."""
    ours, theirs = figures.get("aio_cluster"), figures.get("confluent")
    if not ours or not theirs:
        return ""
    ratio = cpu_per_million(ours, messages) / cpu_per_million(theirs, messages)
    return (
        f"aio_cluster spends {ratio:.2f}x the CPU per record of librdkafka "
        "(confluent-kafka's Consumer), the join included."
    )


def paired(
    runs: list[dict[str, float] | None],
    baseline: list[dict[str, float] | None],
    key: str = "rate",
) -> float:
    """The median of each round's ratio of ``key`` to that round's baseline: steadier than the
    ratio of medians when the machine's load drifts during the run."""
    return median(
        [
            run[key] / base[key]
            for run, base in zip(runs, baseline, strict=True)
            if run is not None and base is not None
        ]
    )


def add_worker_options(parser: argparse.ArgumentParser, contenders: Iterable[str]) -> None:
    """The hidden options of a contender's own process (see `dispatch`)."""
    parser.add_argument("--worker", choices=list(contenders), help=argparse.SUPPRESS)
    worker_addresses(parser)


def dispatch(
    arguments: argparse.Namespace,
    worker: Callable[[str, Run], None],
    main: Callable[[argparse.Namespace], Awaitable[None]],
) -> None:
    """Run one contender (``--worker``, in the process `measure` started) or the whole
    benchmark."""
    if arguments.worker:
        run = Run(
            arguments.bootstrap,
            arguments.zookeeper,
            arguments.topic,
            arguments.partitions,
            arguments.messages,
        )
        worker(arguments.worker, run)
    else:
        asyncio.run(main(arguments))


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    messages, size, partitions = DEFAULT_SHAPE
    parser.add_argument("--messages", type=int, default=messages)
    parser.add_argument("--size", type=int, default=size)
    parser.add_argument("--partitions", type=int, default=partitions)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per contender run")
    add_worker_options(parser, CONTENDERS)
    return parser.parse_args()


if __name__ == "__main__":
    dispatch(parse(), worker, main)
