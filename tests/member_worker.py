"""One consumer-group member in a process of its own, for the multi-process tests.

Usage: python member_worker.py BOOTSTRAP ZOOKEEPER TOPIC GROUP OUT_FILE auto|manual|process
    [SESSION_S [MEMBER_NAME REJOIN_GRACE_S]]

``AIO_CLUSTER_WORKER_OPTIONS``, where set, is a JSON object of more `ConsumerGroup` options
(the soak gives its members a short ``fetch_timeout`` so).

Prints ``joined`` once registered. Writes one line ``partition offset key`` per consumed record
to OUT_FILE, flushed before the batch counts as processed. SIGTERM makes it leave gracefully: the
loop stops at the next batch boundary, before processing, and the member closes. SIGUSR1 blocks
its event loop for a minute, as a body stuck in synchronous code would; kazoo's threads go on
answering ZooKeeper's pings, so the session holds. In ``process`` mode the records go through
``process()`` instead, 50 at a time in key order, each handler awaiting a random 0-20 ms (half a
second for one value in 50, so that a partition has several batches in flight); OUT_FILE
then logs every run instead: ``start RUN CLOCK MEMBER PARTITION OFFSET KEY VALUE`` as the handler
starts and ``OUTCOME RUN CLOCK`` as it ends (``done``, or ``cancelled`` by the member), RUN
numbering the process's runs and CLOCK read from CLOCK_MONOTONIC (one clock for every process of a
Linux machine, never stepped, so the runs of different processes compare); SIGTERM closes the
member, which waits for the handlers in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import random
import signal
import sys
import time
from typing import Any

from aio_cluster import ConsumerGroup, CoordinationError, NotOwnedError, Record

OPTIONS_VARIABLE = "AIO_CLUSTER_WORKER_OPTIONS"
"""The environment variable of more `ConsumerGroup` options (a JSON object) for the member."""


def clock() -> float:
    """The runs' clock: CLOCK_MONOTONIC, which the test process reads too (see the module)."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def worker_member(
    bootstrap: str,
    zookeeper: str,
    topic: str,
    group: str,
    session: str,
    name: str | None,
    grace: str | None,
    **options: Any,
) -> ConsumerGroup:
    """The member a worker process runs (this one or ``pipeline_worker.py``), from the
    command line's arguments: the tests' short loop delay, the session and, if ``name`` is
    given, a named member with its rejoin grace; ``options`` go to `ConsumerGroup` too, and
    those of `OPTIONS_VARIABLE`."""
    options = {**json.loads(os.environ.get(OPTIONS_VARIABLE, "{}")), **options}
    return ConsumerGroup(
        group,
        [bootstrap],
        [zookeeper],
        topic,
        loop_delay=0.1,
        session_timeout=float(session),
        member_name=name,
        rejoin_grace=None if grace is None else float(grace),
        **options,
    )


def joined(member: ConsumerGroup, stop: asyncio.Event) -> asyncio.Task[None]:
    """Say the member joined (the test waits for the line); the task closes the member (it
    leaves gracefully) once ``stop`` is set (on SIGTERM)."""
    print("joined", flush=True)

    async def leave_on_signal() -> None:
        await stop.wait()
        await member.close()

    return asyncio.create_task(leave_on_signal())


async def main(
    bootstrap: str,
    zookeeper: str,
    topic: str,
    group: str,
    out: str,
    mode: str,
    session: str,
    name: str | None = None,
    grace: str | None = None,
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, time.sleep, 60.0)
    member = worker_member(bootstrap, zookeeper, topic, group, session, name, grace)
    async with member:
        leaver = joined(member, stop)
        with open(out, "a", encoding="ascii") as sink:
            if mode == "process":
                rng = random.Random()
                runs = itertools.count()

                def note(line: str) -> None:
                    sink.write(line + "\n")
                    sink.flush()

                async def handler(record: Record) -> None:
                    run = next(runs)
                    key = (record.key or b"").decode()
                    value = (record.value or b"").decode()
                    note(
                        f"start {run} {clock()} {member.id} {record.partition} {record.offset} "
                        f"{key} {value}"
                    )
                    outcome = "cancelled"
                    try:
                        # One record in 50 is slow: its key waits for it, while the records of
                        # other keys go on into its partition's next batches (several of them
                        # in flight).
                        slow = value.isdigit() and int(value) % 50 == 7
                        await asyncio.sleep(0.5 if slow else rng.random() * 0.02)
                        outcome = "done"
                    finally:
                        note(f"{outcome} {run} {clock()}")

                await member.process(handler, concurrency=50, ordering="key")
                await leaver
                return
            async for partition, batch in member.batches(commit=mode == "auto"):
                if stop.is_set():
                    break
                sink.writelines(
                    f"{partition} {record.offset} {(record.key or b'').decode()}\n"
                    for record in batch
                )
                sink.flush()
                if mode == "manual":
                    # As a service would: an offset not stored (ZooKeeper away, or the partition
                    # gone meanwhile) means the batch comes again, at least once.
                    with contextlib.suppress(CoordinationError, NotOwnedError):
                        await member.commit(partition, batch[-1].offset + 1)
        stop.set()
        await leaver


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:7], *(sys.argv[7:8] or ["10"]), *sys.argv[8:10]))
