"""One consumer-group member in a process of its own, for the multi-process tests.

Usage: python member_worker.py BOOTSTRAP ZOOKEEPER TOPIC GROUP OUT_FILE auto|manual|process
    [SESSION_S [MEMBER_NAME REJOIN_GRACE_S]]

Prints ``joined`` once registered. Writes one line ``partition offset key`` per consumed record
to OUT_FILE, flushed before the batch counts as processed. SIGTERM makes it leave gracefully: the
loop stops at the next batch boundary, before processing, and the member closes. SIGUSR1 blocks
its event loop for a minute, as a body stuck in synchronous code would; kazoo's threads go on
answering ZooKeeper's pings, so the session holds. In ``process`` mode the records go through
``process()`` instead, 50 at a time in key order, each handler awaiting a random 0-20 ms before
it writes its line; SIGTERM closes the member, which waits for the handlers in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import sys
import time

from aio_cluster import ConsumerGroup, CoordinationError, NotOwnedError, Record


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
    member = ConsumerGroup(
        group,
        [bootstrap],
        [zookeeper],
        topic,
        loop_delay=0.1,
        session_timeout=float(session),
        member_name=name,
        rejoin_grace=None if grace is None else float(grace),
    )
    async with member:
        print("joined", flush=True)

        async def leave_on_signal() -> None:
            await stop.wait()
            await member.close()

        leaver = asyncio.create_task(leave_on_signal())
        with open(out, "a", encoding="ascii") as sink:
            if mode == "process":
                rng = random.Random()

                async def handler(record: Record) -> None:
                    await asyncio.sleep(rng.random() * 0.02)
                    key = (record.key or b"").decode()
                    sink.write(f"{record.partition} {record.offset} {key}\n")
                    sink.flush()

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
