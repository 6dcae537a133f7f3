"""The CPU a ZooKeeper call costs the process making it: the adapter with its thread handler
(`aio_cluster.zookeeper.threads.LoopHandler`) against the same adapter on kazoo's stock handler,
in the same run, rounds alternating.

Two shapes: one client making one call at a time, and ten clients in one process (as a worker
hosting ten members) with a hundred calls in flight, as a rebalance's claims and releases make
them. Each call is an ``exists`` of ``/``, the cheapest request, so the figure is the client's own
cost. The process's CPU (user + system, all its threads) is read from its resource usage.

    python benchmarks/zookeeper_calls.py [--calls N] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import time
from collections.abc import Callable
from typing import Any

from common import RESULTS, markdown_table, median, table
from kazoo.handlers.threading import SequentialThreadingHandler

from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper import client as zk_client
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.threads import LoopHandler

HANDLERS: dict[str, Callable[[], Any]] = {
    "kazoo's handler": SequentialThreadingHandler,
    "LoopHandler": LoopHandler,
}
SHAPES = {"1 client, 1 call at a time": (1, 1), "10 clients, 100 calls in flight": (10, 100)}


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def once(
    connect: str, handler: Callable[[], Any], clients: int, flight: int, calls: int
) -> float:
    """Microseconds of the process's CPU per call."""
    zk_client.LoopHandler = handler  # the adapter builds its handler by this name
    try:
        zks = [ZooKeeper(connect) for _ in range(clients)]
    finally:
        zk_client.LoopHandler = LoopHandler
    for zk in zks:
        await zk.start()
    try:

        async def call(zk: ZooKeeper, count: int) -> None:
            for _ in range(count):
                await zk.exists("/")

        await asyncio.gather(*(call(zk, 20) for zk in zks))  # warm: connections, first pings
        before = cpu()
        await asyncio.gather(*(call(zks[i % clients], calls // flight) for i in range(flight)))
        return (cpu() - before) * 1e6 / calls
    finally:
        for zk in zks:
            await zk.close()


async def main(args: argparse.Namespace) -> None:
    async with LocalCluster() as cluster:
        rows = []
        for shape, (clients, flight) in SHAPES.items():
            costs: dict[str, list[float]] = {name: [] for name in HANDLERS}
            for _ in range(args.rounds):
                for name, handler in HANDLERS.items():
                    costs[name].append(
                        await once(cluster.zookeeper, handler, clients, flight, args.calls)
                    )
            base = median(costs["kazoo's handler"])
            for name in HANDLERS:
                mid = median(costs[name])
                rows.append(
                    (
                        shape,
                        name,
                        f"{mid:.0f}",
                        f"{min(costs[name]):.0f}-{max(costs[name]):.0f}",
                        f"{mid / base:.2f}",
                    )
                )
    headers = ("calls", "handler", "CPU µs a call (median)", "range", "ratio")
    print(table(headers, rows))
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    (RESULTS / "zookeeper-calls.md").write_text(
        f"# ZooKeeper calls\n\n`python benchmarks/zookeeper_calls.py --calls {args.calls} --rounds "
        f"{args.rounds}`, {stamp}, load average {os.getloadavg()[0]:.1f}: the process's CPU per "
        f"`exists` call, medians of {args.rounds} alternating rounds of {args.calls} calls.\n\n"
        + markdown_table(headers, rows)
        + "\n"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=5)
    asyncio.run(main(parser.parse_args()))
