"""How long the local cluster takes to start (until every server answers and, with several
Kafka nodes, every broker has joined) and to stop, with one node of each and with three, and the
CPU its JVMs spend from the start to the stop: with the class archives the first start wrote
(`aio_cluster.local.class_archive`), and without them, measured in the same run, alternating.

Always starts its own clusters with Java (the environment's cluster is not used). A start and a
stop of each size come first, unmeasured, so that the archives exist. Repeated ``--rounds``
times (default 3); the machine's load average is printed with the figures, since other work on
the machine moves them much. Results go to ``benchmarks/results/startup.md``.

    python benchmarks/startup.py [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import time
from unittest import mock

from common import median, show, write_result

from aio_cluster.local import LocalCluster
from aio_cluster.local.class_archive import ClassArchive


def children_cpu() -> float:
    """CPU-seconds of the child processes ended so far (the JVMs, once stopped)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


async def once(nodes: int, *, archives: bool) -> tuple[float, float, float]:
    """One start and stop: (start s, stop s, CPU-seconds of its JVMs)."""
    without = mock.patch.object(ClassArchive, "flags", return_value=[])
    with contextlib.nullcontext() if archives else without:
        cluster = LocalCluster(brokers=nodes, zookeepers=nodes, use_env=False)
        cpu = children_cpu()
        began = time.perf_counter()
        await cluster.start()
        started = time.perf_counter() - began
        began = time.perf_counter()
        await cluster.stop()
        return started, time.perf_counter() - began, children_cpu() - cpu


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    rows = []
    for nodes in (1, 3):
        await once(nodes, archives=True)  # writes the archives where none are yet
        found: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
        for _ in range(rounds):
            for archives in (False, True):
                found[archives].append(await once(nodes, archives=archives))
        reference = median([cpu for _, _, cpu in found[False]])
        for archives, times in found.items():
            cpu = median([cpu for _, _, cpu in times])
            rows.append(
                [
                    f"{nodes} ZooKeeper + {nodes} Kafka",
                    "with" if archives else "without",
                    f"{median([start for start, _, _ in times]):.1f}",
                    f"{median([stop for _, stop, _ in times]):.1f}",
                    f"{cpu:.1f}",
                    f"{cpu / reference:.2f}",
                ]
            )
    title = f"The local cluster's start and stop, median of {rounds}"
    headers = ["cluster", "class archives", "start s", "stop s", "JVM CPU s", "CPU ratio"]
    write_result(
        "startup.md",
        "The local cluster's start and stop",
        show(title, headers, rows),
        "CPU ratio: to the same cluster without class archives, measured in the same run.",
    )


if __name__ == "__main__":
    asyncio.run(main())
