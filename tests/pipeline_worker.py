"""One member of a pipeline group in a process of its own: it reads the input topic and writes one
output record per input record to the output topic, for the exactly-once tests.

Usage: python pipeline_worker.py BOOTSTRAP ZOOKEEPER INPUT OUTPUT GROUP MODE SESSION_S
    [MEMBER_NAME REJOIN_GRACE_S]

MODE is how it consumes and writes:

- ``transactions``: an ``exactly_once`` group's ``transactions()`` loop, a batch's output and its
  offset in one transaction (a loop that raises ProducerFencedError, as a zombie's does, is
  iterated again);
- ``process``: an ``exactly_once`` group's ``process_transactional()``, 50 handlers at once in
  key order, each awaiting a random 0-5 ms before it sends;
- ``plain``: at least once, as a service without the mode writes: ``async for`` and a producer
  of its own, every send of a batch delivered before the loop asks for the next batch;
- ``plain-process``: at least once with ``process()``: a handler awaits its record's delivery.

An output record has the input record's key and value, and a header ``from`` naming the member
and the input's partition and offset (what a test prints when an input came out twice). Prints
``joined`` once registered. SIGTERM makes it leave gracefully: the loop stops at the next batch
(whose transaction is aborted: the batch comes again to the next owner), and the member closes.
"""

from __future__ import annotations

import asyncio
import random
import signal
import sys

from aiokafka import AIOKafkaProducer

from aio_cluster import ConsumerGroup, Output, ProducerFencedError, Record

from member_worker import joined, worker_member

MODES = ("transactions", "process", "plain", "plain-process")


def origin(member: ConsumerGroup, record: Record) -> list[tuple[str, bytes]]:
    """The ``from`` header of ``record``'s output."""
    return [("from", f"{member.id} {record.partition} {record.offset}".encode())]


async def main(
    bootstrap: str,
    zookeeper: str,
    source: str,
    sink: str,
    group: str,
    mode: str,
    session: str,
    name: str | None = None,
    grace: str | None = None,
) -> None:
    if mode not in MODES:
        raise SystemExit(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    member = worker_member(
        bootstrap,
        zookeeper,
        source,
        group,
        session,
        name,
        grace,
        exactly_once=not mode.startswith("plain"),
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        async with member:
            leaver = joined(member, stop)
            if mode == "transactions":
                while not stop.is_set():
                    try:
                        async for _partition, batch, output in member.transactions():
                            if stop.is_set():
                                break
                            for record in batch:
                                await output.send(
                                    sink,
                                    record.value,
                                    key=record.key,
                                    headers=origin(member, record),
                                )
                        break
                    except ProducerFencedError:
                        # A newer owner took a partition over (this one was a zombie): that
                        # batch's output is dropped; the loop goes on with the others.
                        continue
            elif mode == "process":
                rng = random.Random()

                async def handler(record: Record, output: Output) -> None:
                    await asyncio.sleep(rng.random() * 0.005)
                    await output.send(
                        sink, record.value, key=record.key, headers=origin(member, record)
                    )

                await member.process_transactional(handler, concurrency=50, ordering="key")
            elif mode == "plain":
                async for _partition, batch in member:
                    if stop.is_set():
                        break
                    sent = [
                        await producer.send(
                            sink, record.value, key=record.key, headers=origin(member, record)
                        )
                        for record in batch
                    ]
                    await asyncio.gather(*sent)
            else:

                async def plain_handler(record: Record) -> None:
                    delivered = await producer.send(
                        sink, record.value, key=record.key, headers=origin(member, record)
                    )
                    await delivered

                await member.process(plain_handler, concurrency=50, ordering="key")
            stop.set()
            await leaver
    finally:
        await producer.stop()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:8], *sys.argv[8:10]))
