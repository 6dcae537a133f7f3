"""process() behind one slow record: its first record fails and waits for its retries (three
back-offs, 0.5 + 1 + 2 s), and the records after it, of 50 other keys, come in later batches
(each handler awaits a seeded random 0-5 ms). Timed from the first handler call to the end of
the last record of another key: how long the slow record held the others back.

Today's member takes a partition's next batch into the running one while records of it wait
(``process()`` holds back the waiting record's key only); the baseline is the code before that,
where the partition's next batch waited for every record of the running one: the same member
with that growth switched off (``Processor._grows`` answering no), run just before each run of
today's, so the ratio is paired. Also a section of ``benchmarks/processing.py``.

    python benchmarks/head_of_line.py [--records N] [--repeat R]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from unittest import mock

from aiokafka import AIOKafkaProducer
from common import RESULTS, create_topic, fresh, show

from aio_cluster import ConsumerGroup, Record
from aio_cluster.local import LocalCluster
from aio_cluster.member.processing.processor import Processor

KEYS = 50
FAILURES = 3
RETRY_INITIAL = 0.5
"""The slow record fails three times: back-offs of 0.5, 1 and 2 s (no jitter)."""
MAX_BYTES = 16_384
"""The member's fetch size per partition: batches of about 200 of these records."""
CHUNK = 100
"""Records the producer writes at a time (a record batch of its own each)."""


async def fill(bootstrap: str, topic: str, records: int) -> None:
    """The slow record (key ``slow``), then ``records`` of `KEYS` keys."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1)
    await producer.start()
    try:
        await producer.send_and_wait(topic, key=b"slow", value=b"v", partition=0)
        for start in range(0, records, CHUNK):
            for offset in range(start, min(start + CHUNK, records)):
                await producer.send(topic, key=f"k{offset % KEYS}".encode(), partition=0)
            await producer.flush()
    finally:
        await producer.stop()


async def behind_the_slow_one(
    cluster: LocalCluster, topic: str, records: int, waits: list[float], *, grows: bool
) -> float:
    """Seconds from the first handler call until every record of another key finished."""
    others_done = asyncio.Event()
    done = 0
    first = last = 0.0
    calls = 0

    async def handler(record: Record) -> None:
        nonlocal done, first, last, calls
        if not first:
            first = time.perf_counter()
        if record.key == b"slow":
            calls += 1
            if calls <= FAILURES:
                raise RuntimeError("the slow record fails (the benchmark)")
            return
        await asyncio.sleep(waits[record.offset - 1])
        done += 1
        if done == records:
            last = time.perf_counter()
            others_done.set()

    group = ConsumerGroup(
        fresh("bench"), cluster.bootstrap, cluster.zookeeper, topic, max_bytes=MAX_BYTES
    )
    switch = (
        contextlib.nullcontext()
        if grows
        else mock.patch.object(Processor, "_grows", return_value=False)
    )
    with switch:
        async with group:
            task = asyncio.create_task(
                group.process(
                    handler,
                    attempts=FAILURES + 1,
                    retry_initial=RETRY_INITIAL,
                    retry_jitter=0.0,
                )
            )
            try:
                await others_done.wait()
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    return last - first


async def head_of_line_section(cluster: LocalCluster, records: int, repeat: int) -> str:
    """Today's member against the one before, paired (see the module): printed, written to
    ``processing-head-of-line.md``, and returned as Markdown."""
    topic = await create_topic(cluster.bootstrap, 1)
    await fill(cluster.bootstrap, topic, records)
    rng = random.Random(18)
    waits = [rng.uniform(0, 0.005) for _ in range(records)]

    def run(grows: bool) -> Callable[[], Awaitable[float]]:
        return lambda: behind_the_slow_one(cluster, topic, records, waits, grows=grows)

    before: list[float] = []
    now: list[float] = []
    for _ in range(repeat):
        before.append(await run(False)())
        now.append(await run(True)())
    ratios = [b / n for b, n in zip(before, now, strict=True)]
    back_off = sum(RETRY_INITIAL * 2**i for i in range(FAILURES))
    print(
        f"head of line: before {statistics.median(before):.3f}s, now {statistics.median(now):.3f}s",
        file=sys.stderr,
    )
    headers = [
        "process(), ordering='key'",
        "seconds until the other keys finished",
        "x the slow record's back-off",
        "speed-up over the code before (paired)",
    ]
    rows = [
        [
            "before: the next batch waits for the running one",
            f"{statistics.median(before):.3f}",
            f"{statistics.median(before) / back_off:.2f}",
            "1",
        ],
        [
            "now: the running batch grows while records wait",
            f"{statistics.median(now):.3f}",
            f"{statistics.median(now) / back_off:.2f}",
            f"{statistics.median(ratios):.1f}",
        ],
    ]
    title = (
        f"Head of line: one record retried {FAILURES} times ({back_off:g} s of back-off) ahead "
        f"of {records:,} records of {KEYS} other keys in later batches of about 200, each "
        f"handler awaiting a random 0-5 ms; medians of {repeat} pairs"
    )
    text = show(title, headers, rows)
    command = "python benchmarks/head_of_line.py " + " ".join(sys.argv[1:])
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "processing-head-of-line.md").write_text(
        f"# Processing: head of line\n\n`{command.strip()}`, {when}\n\n{text}"
    )
    return text


async def main(args: argparse.Namespace) -> None:
    async with LocalCluster() as cluster:
        await head_of_line_section(cluster, args.records, args.repeat)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=3_000)
    parser.add_argument("--repeat", type=int, default=3, help="pairs of runs (median)")
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse()))
