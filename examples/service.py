"""A consumer-group member inside an asyncio service, with graceful shutdown on SIGTERM/Ctrl-C.

The member runs in the service's task group next to whatever else the service does. On a signal
the member closes: the loop ends at the next batch boundary, completed batches are committed, and
the member's partitions go to the rest of the group. The same shape fits a FastAPI or aiohttp
lifespan: register in the start-up half, close in the shutdown half.

    AIO_CLUSTER_BOOTSTRAP=127.0.0.1:9092 AIO_CLUSTER_ZOOKEEPER=127.0.0.1:2181 \\
        python examples/service.py my-group my-topic
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import anyio

from aio_cluster import ConsumerGroup


async def handle(partition: int, batch: list[object]) -> None:
    """The service's own work; here it only reports the batch."""
    print(f"partition {partition}: {len(batch)} records")


async def main(group_name: str, topic: str) -> None:
    group = ConsumerGroup(
        group_name,
        os.environ["AIO_CLUSTER_BOOTSTRAP"].split(","),
        os.environ["AIO_CLUSTER_ZOOKEEPER"].split(","),
        topic,
    )
    async with group, anyio.create_task_group() as tasks:

        async def close_on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _signal in signals:
                    await group.close()
                    return

        tasks.start_soon(close_on_signal)
        async for partition, batch in group:
            await handle(partition, batch)
        tasks.cancel_scope.cancel()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
