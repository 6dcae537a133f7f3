"""An exactly-once pipeline: read a topic, write one upper-cased record per input to another.

The group is ``exactly_once``: what a handler sends through its ``output`` and the input offsets
commit in one Kafka transaction per input partition, so a reader of the output topic with
``isolation_level="read_committed"`` sees each input's output once, whatever crashes, freezes
or rebalances happen (a handler retried, a member killed and its partitions taken over). Run
two of them at once and kill one: the other takes its partitions over and nothing is written
twice.

    export AIO_CLUSTER_BOOTSTRAP=127.0.0.1:9092 AIO_CLUSTER_ZOOKEEPER=127.0.0.1:2181
    python examples/exactly_once.py my-group my-topic my-topic-upper

Ctrl-C or SIGTERM: the handlers in flight finish, their transactions commit, the member leaves.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal

from aio_cluster import ConsumerGroup, Output, Record


async def main(name: str, source: str, sink: str) -> None:
    group = ConsumerGroup(
        name,
        os.environ["AIO_CLUSTER_BOOTSTRAP"].split(","),
        os.environ["AIO_CLUSTER_ZOOKEEPER"].split(","),
        source,
        exactly_once=True,
    )

    async def upper(record: Record, output: Output) -> None:
        # Kept until the record finished; committed with the offset past it, or never.
        await output.send(sink, (record.value or b"").upper(), key=record.key)

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: asyncio.ensure_future(group.close()))
    async with group:
        print(f"member {group.id} joined with partitions {group.claimed}", flush=True)
        # Each partition's completed records commit every commit_interval seconds.
        await group.process_transactional(upper, commit_interval=0.1, concurrency=50)
    print("left the group", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("group")
    parser.add_argument("source")
    parser.add_argument("sink")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.group, arguments.source, arguments.sink))
