"""Manual commits: the app decides when an offset is stored, with ``batches(commit=False)``.

The app writes the records it consumes to a file in chunks and stores each partition's offset
only once its chunk is written and flushed to disk: a crash never skips a record that did not
reach the file (at least once). On Ctrl-C or SIGTERM it stops taking batches, writes and commits
what it holds, then leaves the group.

With ``commit=False`` an uncommitted batch is not held back from a rebalance: when a partition
moves to another member, that member starts at the last offset this app committed, and gets
again what this app consumed after it.

    export AIO_CLUSTER_BOOTSTRAP=127.0.0.1:9092 AIO_CLUSTER_ZOOKEEPER=127.0.0.1:2181
    python examples/manual_commit.py my-group my-topic out.txt --every 100
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
from pathlib import Path
from typing import TextIO

import anyio

from aio_cluster import Batch, ConsumerGroup, NotOwnedError


class Chunk:
    """Records consumed and not yet written, and the offsets to commit once they are."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.next_offsets: dict[int, int] = {}

    def add(self, partition: int, batch: Batch) -> None:
        self.lines.extend(f"{partition} {r.offset} {(r.value or b'').decode()}\n" for r in batch)
        self.next_offsets[partition] = batch[-1].offset + 1

    async def write_and_commit(self, out: TextIO, group: ConsumerGroup) -> None:
        """Write the chunk, flush it to disk, then commit each partition's next offset."""
        out.writelines(self.lines)
        out.flush()
        os.fsync(out.fileno())
        for partition, offset in self.next_offsets.items():
            # A partition that moved to another member meanwhile: it starts at our last commit.
            with contextlib.suppress(NotOwnedError):
                await group.commit(partition, offset)
        print(f"wrote and committed {len(self.lines)} records: {self.next_offsets}", flush=True)
        self.lines.clear()
        self.next_offsets.clear()


async def main(name: str, topic: str, path: Path, every: int) -> None:
    group = ConsumerGroup(
        name,
        os.environ["AIO_CLUSTER_BOOTSTRAP"].split(","),
        os.environ["AIO_CLUSTER_ZOOKEEPER"].split(","),
        topic,
    )
    chunk = Chunk()
    with path.open("a") as out:
        async with group, anyio.create_task_group() as tasks:

            async def stop_on_signal() -> None:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for _signal in signals:
                        consuming.cancel()
                        return

            tasks.start_soon(stop_on_signal)
            with anyio.CancelScope() as consuming:
                async for partition, batch in group.batches(commit=False):
                    chunk.add(partition, batch)
                    if len(chunk.lines) >= every:
                        with anyio.CancelScope(shield=True):
                            await chunk.write_and_commit(out, group)
            # Stopped by a signal, still a member: store what was consumed, then leave.
            await chunk.write_and_commit(out, group)
            tasks.cancel_scope.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="consume and commit when the app decides")
    parser.add_argument("group")
    parser.add_argument("topic")
    parser.add_argument("out", type=Path, help="the file the records are appended to")
    parser.add_argument("--every", type=int, default=100, help="records per written chunk")
    options = parser.parse_args()
    anyio.run(main, options.group, options.topic, options.out, options.every)
