"""How long the local cluster takes to start (until every server answers and, with several
Kafka nodes, every broker has joined) and to stop, with one node of each and with three.

Always starts its own clusters with Java (the environment's cluster is not used). Repeated
``--rounds`` times (default 3); the machine's load average is printed with the figures, since
other work on the machine moves them much.

    python benchmarks/startup.py [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from common import median, table

from aio_cluster.local import LocalCluster


async def once(nodes: int) -> tuple[float, float]:
    cluster = LocalCluster(brokers=nodes, zookeepers=nodes, use_env=False)
    began = time.perf_counter()
    await cluster.start()
    started = time.perf_counter() - began
    began = time.perf_counter()
    await cluster.stop()
    return started, time.perf_counter() - began


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    rows = []
    for nodes in (1, 3):
        load = os.getloadavg()[0]
        times = [await once(nodes) for _ in range(rounds)]
        rows.append(
            (
                f"{nodes} ZooKeeper + {nodes} Kafka",
                f"{median([start for start, _ in times]):.1f} s",
                f"{median([stop for _, stop in times]):.1f} s",
                f"{load:.1f}",
            )
        )
    print(table(("cluster", f"start (median of {rounds})", "stop", "load average"), rows))


if __name__ == "__main__":
    asyncio.run(main())
