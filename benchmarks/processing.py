"""ConsumerGroup.process() on parallel-consumer's published workload: records on one partition,
a handler that awaits a seeded random 0-5 ms, in every ordering, beside the plain ``async for``
loop of the same run.

Each mode reads its own topic (the same record count, keyed for the mode) with a fresh group;
its time runs from the first handler call to the last handler's end. The ideal of a mode is the
longest chain of handler delays its ordering forces, computed from the same seeds: partition
order, the sum of all delays; key order, the largest sum of one key's delays; no order, the
largest delay (the table shows ``sum / concurrency`` beside it, the bound the concurrency cap
sets). parallel-consumer's published figures are for its own JVM run, shown for scale only.
A no-op handler measures the records per second of `process()` against the plain loop, at the
default concurrency and at ``--concurrency``.
Runs under ``SHORT`` seconds (the concurrent modes, asyncio's floor, the no-op handler) are
repeated ``--repeat`` times and their median kept: one run of a tenth of a second swings by half
with the machine's other work. A ratio to a baseline (a mode to asyncio's floor, the no-op
handler to the plain loop) is the median of the ratios of pairs, each run just after a run of
its baseline (`paired()`), so that the machine's drift over the benchmark falls on both sides
of each ratio. Before each timed run the garbage of the runs before it is
collected (``gc.collect()``): a collection of the whole heap, which the earlier runs' records
fill, takes tens of milliseconds, as long as a concurrent mode's whole run.
Results go to ``benchmarks/results/processing.md`` and ``processing.png``.

The bulk section (`bulk_section()`, also alone with ``--bulk-only``) sets ``process_bulk()``
against ``process()`` where each call costs what a database round trip does: 5 ms plus 0.05 ms per
record, on a store that takes ``--pool`` calls at once (a connection pool); the per-record handler
pays the same per call, of one record. The records have a key each (``ordering="key"``). Its
ideal is the calls' costs, as many at a time as the pool takes and ``--concurrency`` lets gather
(``concurrency // size``: every record in a call holds a handler slot). It goes to
``processing-bulk.md``.

The head-of-line section (``benchmarks/head_of_line.py``, also alone) times the records of other
keys behind one record that waits for its retries, against the code before, in which a
partition's next batch waited for every record of its running batch; it goes to
``processing-head-of-line.md``.

    python benchmarks/processing.py [--records N] [--concurrency C] [--noop-records N]
                                    [--repeat R] [--pool P] [--bulk-only]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import random
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer
from aiokafka.structs import ConsumerRecord
from common import RESULTS, create_topic, fresh, markdown_table, show
from head_of_line import head_of_line_section
from rich.console import Console

from aio_cluster import ConsumerGroup, Processing, Record
from aio_cluster.local import LocalCluster

HEAD_OF_LINE_RECORDS = 3_000
"""Records behind the slow one in the head-of-line section (`head_of_line`)."""

SHORT = 2.0
"""Seconds under which a run is repeated (see the module)."""

PUBLISHED = {
    "partition": 22.2,
    "key 1": 26.7,
    "key 10": 3.3,
    "key 100": 2.18,
    "key 10000": 2.13,
    "none": 2.83,
}
"""parallel-consumer's published seconds for 10,000 records (its README's benchmark)."""


@dataclass
class Mode:
    label: str
    ordering: str
    keys: int


def modes(records: int) -> list[Mode]:
    found = [Mode("partition", "partition", 1)]
    found += [Mode(f"key {n}", "key", n) for n in (1, 10, 100, 10_000) if n <= records]
    found.append(Mode("none", "none", records))
    return found


def delays(records: int, seed: int) -> list[float]:
    """The handler's delay for each offset: seeded, uniform in 0-5 ms."""
    rng = random.Random(seed)
    return [rng.uniform(0.0, 0.005) for _ in range(records)]


def ideal(mode: Mode, waits: list[float]) -> float:
    """The longest chain of delays the ordering forces."""
    if mode.ordering == "partition":
        return sum(waits)
    if mode.ordering == "none":
        return max(waits)
    chains: dict[int, float] = defaultdict(float)
    for offset, wait in enumerate(waits):
        chains[offset % mode.keys] += wait
    return max(chains.values())


async def fill(bootstrap: str, topic: str, records: int, keys: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, acks=1)
    await producer.start()
    try:
        for offset in range(records):
            await producer.send(topic, key=f"k{offset % keys}".encode(), value=b"v", partition=0)
        await producer.flush()
    finally:
        await producer.stop()


class Clock:
    """From the first handler call (or, with ``from_join``, from the member's join, so that the
    fetches count too) to the last handler's end."""

    def __init__(self, records: int, *, from_join: bool = False) -> None:
        self.records = records
        self.from_join = from_join
        self.done = 0
        self.first = 0.0
        self.last = 0.0
        self.finished = asyncio.Event()

    def start(self) -> None:
        if not self.first:
            self.first = time.perf_counter()

    def end(self) -> None:
        self.done += 1
        if self.done == self.records:
            self.last = time.perf_counter()
            self.finished.set()

    @property
    def seconds(self) -> float:
        return self.last - self.first


def timed(clock: Clock, waits: list[float] | None) -> Callable[[Record], Awaitable[None]]:
    async def handler(record: Record) -> None:
        clock.start()
        if waits is not None:
            await asyncio.sleep(waits[record.offset])
        clock.end()

    return handler


def member(cluster: LocalCluster, topic: str) -> ConsumerGroup:
    return ConsumerGroup(
        fresh("bench"), cluster.bootstrap, cluster.zookeeper, topic, loop_delay=0.1
    )


async def with_process(
    cluster: LocalCluster, topic: str, clock: Clock, waits: list[float] | None, **options: object
) -> float:
    async with member(cluster, topic) as group:
        if clock.from_join:
            clock.start()
        task = asyncio.create_task(group.process(timed(clock, waits), **options))  # type: ignore[arg-type]
        try:
            await clock.finished.wait()
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return clock.seconds


async def with_loop(
    cluster: LocalCluster, topic: str, clock: Clock, waits: list[float] | None
) -> float:
    handler = timed(clock, waits)
    async with member(cluster, topic) as group:
        if clock.from_join:
            clock.start()
        async for _partition, batch in group:
            for record in batch:
                await handler(record)
            if clock.finished.is_set():
                break
    return clock.seconds


async def asyncio_floor(waits: list[float], concurrency: int) -> float:
    """Seconds asyncio itself needs to run the same handler (the same delays, the same clock)
    over as many records, ``concurrency`` at a time, timed as the modes are: what no consumer
    on this machine can beat when the ideal is a few milliseconds. The handler's own work is
    the user's, not the consumer's, so it is on both sides."""
    clock = Clock(len(waits))
    handler = timed(clock, waits)
    pending = iter([stand_in(offset) for offset in range(len(waits))])

    async def worker() -> None:
        for record in pending:
            await handler(record)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return clock.seconds


def stand_in(offset: int) -> Record:
    """A record at ``offset`` for the floor's handler, which reads nothing else."""
    record: Record = ConsumerRecord(
        topic="floor",
        partition=0,
        offset=offset,
        timestamp=0,
        timestamp_type=0,
        key=None,
        value=None,
        checksum=None,
        serialized_key_size=-1,
        serialized_value_size=-1,
        headers=(),
    )
    return record


CALL_COST = 0.005
"""Seconds a call to the store costs, whatever it carries."""
RECORD_COST = 0.00005
"""Seconds a call to the store costs more per record it carries."""
BULK_SIZES = (100, 500)


class Store:
    """A store that takes ``pool`` calls at once, each costing `CALL_COST` plus `RECORD_COST`
    per record."""

    def __init__(self, pool: int) -> None:
        self._pool = asyncio.Semaphore(pool)
        self.calls = 0

    async def write(self, records: int) -> None:
        async with self._pool:
            self.calls += 1
            await asyncio.sleep(CALL_COST + RECORD_COST * records)


def bulk_ideal(records: int, size: int, pool: int, concurrency: int) -> float:
    """The costs of full calls of ``size`` records, as many at a time as the pool takes and the
    concurrency lets gather (every record in a call holds a handler slot)."""
    calls = -(-records // size)
    at_once = min(pool, concurrency // size)
    return -(-calls // at_once) * (CALL_COST + RECORD_COST * size)


async def with_bulk(
    cluster: LocalCluster, topic: str, clock: Clock, store: Store, size: int, concurrency: int
) -> float:
    """``process_bulk()`` on ``topic`` until every record's call returned: the seconds from its
    first call."""

    async def handler(records: list[Record]) -> None:
        clock.start()
        await store.write(len(records))
        for _ in records:
            clock.end()

    async with member(cluster, topic) as group:
        task = asyncio.create_task(
            group.process_bulk(handler, size=size, linger=0.05, concurrency=concurrency)
        )
        try:
            await clock.finished.wait()
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return clock.seconds


async def with_store(
    cluster: LocalCluster, topic: str, clock: Clock, store: Store, concurrency: int
) -> float:
    """``process()`` on ``topic`` with a handler that writes each record in a call of its own."""

    async def handler(record: Record) -> None:
        clock.start()
        await store.write(1)
        clock.end()

    async with member(cluster, topic) as group:
        task = asyncio.create_task(group.process(handler, concurrency=concurrency))
        try:
            await clock.finished.wait()
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return clock.seconds


async def bulk_section(cluster: LocalCluster, args: argparse.Namespace) -> str:
    """The bulk handler against the per-record one on the same store (see the module): printed,
    written to ``processing-bulk.md``, and returned as Markdown."""
    records, pool, concurrency = args.records, args.pool, args.concurrency
    topic = await create_topic(cluster.bootstrap, 1)
    await fill(cluster.bootstrap, topic, records, records)

    def run_per_record() -> Awaitable[float]:
        return with_store(cluster, topic, Clock(records), Store(pool), concurrency)

    per_record = await median_of(args.repeat, run_per_record)
    per_record_ideal = bulk_ideal(records, 1, pool, concurrency)
    print(f"per-record handler: {per_record:.3f}s", file=sys.stderr)
    headers = [
        "handler",
        "seconds",
        "calls",
        "ideal (calls' costs, min(pool, concurrency // size) at a time)",
        "x ideal",
        "speed-up over per-record (paired)",
    ]
    rows = [
        [
            f"process(), concurrency={concurrency}",
            f"{per_record:.3f}",
            f"{records:,}",
            f"{per_record_ideal:.3f}",
            f"{per_record / per_record_ideal:.2f}",
            "1",
        ]
    ]

    def run_bulk(size: int, stores: list[Store]) -> Awaitable[float]:
        stores.append(Store(pool))
        return with_bulk(cluster, topic, Clock(records), stores[-1], size, concurrency)

    for size in BULK_SIZES:
        stores: list[Store] = []
        seconds, to_per_record = await paired(
            args.repeat, functools.partial(run_bulk, size, stores), run_per_record
        )
        best = bulk_ideal(records, size, pool, concurrency)
        calls = statistics.median(store.calls for store in stores)
        print(f"process_bulk(size={size}): {seconds:.3f}s", file=sys.stderr)
        rows.append(
            [
                f"process_bulk(size={size}, linger=0.05), concurrency={concurrency}",
                f"{seconds:.3f}",
                f"{calls:,.0f}",
                f"{best:.3f}",
                f"{seconds / best:.2f}",
                f"{1 / to_per_record:.1f}",
            ]
        )
    title = (
        f"Bulk handler: {records:,} records on one partition, a key each, ordering='key'; every "
        f"call to the store costs {CALL_COST * 1000:g} ms + {RECORD_COST * 1000:g} ms per "
        f"record, {pool} calls at once (a pool of {pool} connections)"
    )
    table = show(title, headers, rows)
    paired_line = (
        "The speed-up is the median of the ratios of a bulk run to a per-record run just before "
        "it, in the same run of the benchmark"
    )
    command = "python benchmarks/processing.py " + " ".join(sys.argv[1:])
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    text = f"{table}\n{paired_line}.\n"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "processing-bulk.md").write_text(
        f"# Processing: bulk handlers\n\n`{command.strip()}`, {when}\n\n{text}"
    )
    return text


async def median_of(repeat: int, run: Callable[[], Awaitable[float]]) -> float:
    """The median seconds of ``repeat`` runs, or of one run when it takes ``SHORT`` or more;
    the garbage of what ran before is collected ahead of each run (see the module)."""

    async def collected() -> float:
        gc.collect()
        return await run()

    first = await collected()
    if first >= SHORT:
        return first
    return statistics.median([first, *[await collected() for _ in range(repeat - 1)]])


async def paired(
    repeat: int, run: Callable[[], Awaitable[float]], baseline: Callable[[], Awaitable[float]]
) -> tuple[float, float]:
    """``run``'s seconds as `median_of()` gives them, and the median of its ratios to
    ``baseline``, run just before each of its runs."""
    seconds: list[float] = []
    ratios: list[float] = []
    while len(seconds) < repeat:
        before = await median_of(1, baseline)
        seconds.append(await median_of(1, run))
        ratios.append(seconds[-1] / before)
        if seconds[0] >= SHORT:
            break
    return statistics.median(seconds), statistics.median(ratios)


async def main(args: argparse.Namespace) -> None:
    waits = delays(args.records, args.seed)
    console = Console(width=180)
    rows: list[list[str]] = []
    chart: list[tuple[str, float, float]] = []
    async with LocalCluster() as cluster:
        if args.bulk_only:
            await bulk_section(cluster, args)
            return
        topics = {}
        for mode in modes(args.records):
            topics[mode.label] = topic = await create_topic(cluster.bootstrap, 1)
            await fill(cluster.bootstrap, topic, args.records, mode.keys)
        noop = await create_topic(cluster.bootstrap, 1)
        await fill(cluster.bootstrap, noop, args.noop_records, 1000)

        def run_floor() -> Awaitable[float]:
            return asyncio_floor(waits, args.concurrency)

        floor = await median_of(args.repeat, run_floor)
        loop_seconds = await median_of(
            args.repeat,
            lambda: with_loop(cluster, topics["partition"], Clock(args.records), waits),
        )
        print(f"plain async for: {loop_seconds:.2f}s", file=sys.stderr)

        def run_mode(mode: Mode) -> Awaitable[float]:
            return with_process(
                cluster,
                topics[mode.label],
                Clock(args.records),
                waits,
                concurrency=args.concurrency,
                ordering=mode.ordering,
            )

        for mode in modes(args.records):
            seconds, to_floor = await paired(
                args.repeat, functools.partial(run_mode, mode), run_floor
            )
            best = ideal(mode, waits)
            bound = max(best, sum(waits) / args.concurrency)
            print(f"{mode.label}: {seconds:.3f}s (ideal {best:.3f}s)", file=sys.stderr)
            published = PUBLISHED.get(mode.label) if args.records == 10_000 else None
            rows.append(
                [
                    mode.label,
                    f"{seconds:.3f}",
                    f"{best:.3f}",
                    f"{seconds / best:.2f}",
                    f"{seconds / bound:.2f}",
                    "yes" if seconds <= 1.5 * best else "no",
                    f"{loop_seconds / seconds:.1f}",
                    f"{seconds / loop_seconds:.2f}",
                    f"{to_floor:.2f}",
                    "-" if published is None else f"{published:.2f}",
                ]
            )
            chart.append((mode.label, seconds, best))

        def run_loop_noop() -> Awaitable[float]:
            return with_loop(cluster, noop, Clock(args.noop_records, from_join=True), None)

        def run_noop(concurrency: int) -> Awaitable[float]:
            clock = Clock(args.noop_records, from_join=True)
            return with_process(cluster, noop, clock, None, concurrency=concurrency)

        loop_noop = await median_of(args.repeat, run_loop_noop)
        process_noop = {
            concurrency: await paired(
                args.repeat, functools.partial(run_noop, concurrency), run_loop_noop
            )
            for concurrency in sorted({Processing().concurrency, args.concurrency})
        }
        bulk = await bulk_section(cluster, args)
        head_of_line = await head_of_line_section(cluster, HEAD_OF_LINE_RECORDS, args.repeat)
    loop_rate = args.noop_records / loop_noop
    headers = [
        "mode",
        "seconds",
        "ideal (longest chain)",
        "x ideal",
        "x max(ideal, sum/concurrency)",
        "within 1.5x ideal",
        "speed-up over async for",
        "x async for",
        "x asyncio floor",
        "parallel-consumer (published)",
    ]
    title = (
        f"{args.records:,} records on one partition, handler awaits a seeded random 0-5 ms "
        f"(seed {args.seed}), concurrency={args.concurrency}; plain async for: "
        f"{loop_seconds:.2f}s"
    )
    floor_line = (
        f"asyncio's own floor on this machine: {floor:.3f}s for the same {args.records:,} "
        f"delays awaited {args.concurrency} at a time by the same handler, no Kafka and no "
        f"bookkeeping (median); "
        f"'x asyncio floor' is the median of a mode's ratios to a run of the floor just before "
        f"each of its runs"
    )
    noop_line = (
        f"No-op handler, {args.noop_records:,} records on one partition, from the join to the "
        f"last record (process() starts its concurrency's workers in that time; each ratio the "
        f"median of its runs' to a plain loop's just before): plain async "
        f"for {loop_rate:,.0f} rec/s; "
        + "; ".join(
            f"process(concurrency={concurrency}) {args.noop_records / seconds:,.0f} rec/s, "
            f"ratio {1 / to_loop:.2f}"
            for concurrency, (seconds, to_loop) in process_noop.items()
        )
        + f" (goal >= 0.8; {Processing().concurrency} is the default)"
    )
    goals_line = (
        "Goals (issue 29): partition order and one key within 1.1x of the plain async for "
        "(x async for); no order and 10,000 keys within 1.5x of asyncio's floor (x asyncio floor)"
    )
    show(title, headers, rows)
    console.print(floor_line)
    console.print(noop_line)
    console.print(goals_line)

    RESULTS.mkdir(exist_ok=True)
    command = "python benchmarks/processing.py " + " ".join(sys.argv[1:])
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    (RESULTS / "processing.md").write_text(
        f"# Processing\n\n{title}.\n\n`{command.strip()}`, {when}\n\n"
        + markdown_table(headers, rows)
        + f"\n\n{floor_line}.\n\n{noop_line}.\n\n{goals_line}.\n\n{bulk}\n{head_of_line}"
    )
    draw(chart, title)


def draw(chart: list[tuple[str, float, float]], title: str) -> None:
    import textwrap  # noqa: PLC0415

    import matplotlib  # noqa: PLC0415 (the bench extra; only the report needs it)

    matplotlib.use("Agg")
    from matplotlib import pyplot  # noqa: PLC0415

    labels = [label for label, _, _ in chart]
    figure, axes = pyplot.subplots(figsize=(9, 0.7 * len(labels) + 1.5))
    ys = list(range(len(labels)))
    axes.barh([y + 0.2 for y in ys], [m for _, m, _ in chart], 0.4, label="process()")
    axes.barh([y - 0.2 for y in ys], [i for _, _, i in chart], 0.4, label="ideal")
    axes.set_yticks(ys, labels)
    axes.invert_yaxis()
    axes.set_xscale("log")
    axes.set_xlabel("seconds (log scale)")
    axes.set_title(textwrap.fill(title, 90), fontsize=9)
    axes.legend()
    figure.tight_layout()
    figure.savefig(RESULTS / "processing.png", dpi=100)
    pyplot.close(figure)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=1000)
    parser.add_argument("--noop-records", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument(
        "--pool", type=int, default=10, help="calls the bulk section's store takes at once"
    )
    parser.add_argument(
        "--bulk-only", action="store_true", help="run only the bulk section (see the module)"
    )
    parser.add_argument(
        "--repeat", type=int, default=5, help=f"runs of each timing under {SHORT:g} s (median)"
    )
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse()))
