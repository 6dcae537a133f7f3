"""Two members of one group sharing a topic: poseidon_cluster's ``examples/consumer_group.rb``,
in asyncio.

The Ruby example runs each member's ``fetch_loop`` in a thread; here each member's ``async for``
runs in a task, and the tasks could equally be processes on different machines. Ctrl-C (or
SIGTERM) makes both members leave: the offsets of the finished batches are stored first.

    export AIO_CLUSTER_BOOTSTRAP=127.0.0.1:9092 AIO_CLUSTER_ZOOKEEPER=127.0.0.1:2181
    python examples/consumer_group.py my-group my-topic
"""

from __future__ import annotations

import argparse
import os
import signal

import anyio

from aio_cluster import ConsumerGroup


async def fetch_loop(number: int, group: ConsumerGroup) -> None:
    """One member's loop: the Ruby block ``|partition, messages|``."""
    async for partition, messages in group:
        print(f"Consumer #{number} fetched {len(messages)} from {partition}", flush=True)


async def main(name: str, topic: str) -> None:
    brokers = os.environ["AIO_CLUSTER_BOOTSTRAP"].split(",")
    zookeepers = os.environ["AIO_CLUSTER_ZOOKEEPER"].split(",")
    # Create a consumer group member
    group1 = ConsumerGroup(name, brokers, zookeepers, topic)
    # Create a second member of the same group
    group2 = ConsumerGroup(name, brokers, zookeepers, topic)

    async with group1, group2, anyio.create_task_group() as tasks:
        # Start consuming the topic in a task of its own; then both consume its partitions in
        # parallel, each its own share.
        tasks.start_soon(fetch_loop, 1, group1)
        tasks.start_soon(fetch_loop, 2, group2)
        # Loop until a signal, then leave: each loop ends at its next batch boundary.
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _signal in signals:
                break
        await group1.close()
        await group2.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="two members of one consumer group")
    parser.add_argument("group")
    parser.add_argument("topic")
    options = parser.parse_args()
    anyio.run(main, options.group, options.topic)
