"""What an idle group costs ZooKeeper: the requests a second each member of a settled group of
``--members`` on one topic sends while nothing happens, over ``--window`` seconds, from the
growth of the server's ``mntr`` ``zk_packets_received``.

Measured in the same run, on a cluster of its own (so that nobody else's requests count), one
after another, each in a worker process of its own:

- the pings alone (the reference): as many bare ZooKeeper sessions, each pinging by the member's
  rule (whenever nothing was answered for a sixth of the negotiated timeout, see
  `aio_cluster.member.protocol.liveness`);
- ``--baseline DIR``, if given: the members of the ``aio_cluster`` package found in DIR (e.g.
  ``git archive <commit> aio_cluster | tar -x -C DIR``);
- this version's members.

Each figure is given as a ratio to the pings alone. Target (issue 54): an idle member costs
within 10 % of its session's pings. Results go to ``benchmarks/results/idle.md``.

    python benchmarks/idle.py [--members M] [--window S] [--rounds R] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
from common import (
    create_topic,
    delete_topic,
    fresh,
    median,
    show,
    worker_addresses,
    write_result,
    zookeeper_packets,
)

from aio_cluster import ConsumerGroup
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper

SETTLE = 5.0
"""Seconds the group is left alone once every partition is claimed before the window opens:
the last rebalance's writes and the members' first looks are over by then."""


# -- the worker: sessions or members, kept until stdin closes ------------------------------


async def heartbeat(zk: ZooKeeper) -> None:
    """Ping whenever nothing was answered for a sixth of the timeout: the member's rule."""
    while True:
        due = zk.negotiated_timeout / 6 - (time.monotonic() - zk.heard_at)
        if due > 0:
            await anyio.sleep(due)
            continue
        await zk.ping()


async def members(args: argparse.Namespace) -> list[ConsumerGroup]:
    """The members, started together, once every partition is claimed."""
    group = fresh("idle")
    joined = [
        ConsumerGroup(group, args.bootstrap, args.zookeeper, args.topic, register=False)
        for _ in range(args.members)
    ]
    await asyncio.gather(*(member.register() for member in joined))
    while True:  # a member's register() returns before the rebalances of those after it
        if sorted(p for m in joined for p in m.claimed) == list(range(args.members)):
            return joined
        await asyncio.sleep(0.1)


async def serve(args: argparse.Namespace) -> None:
    async with anyio.create_task_group() as tasks:
        if args.worker == "sessions":
            sessions = [ZooKeeper(args.zookeeper) for _ in range(args.members)]
            for zk in sessions:
                await zk.start()
                tasks.start_soon(heartbeat, zk)
        else:
            joined = await members(args)
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.read)  # until the controller closes it
        tasks.cancel_scope.cancel()
    if args.worker == "sessions":
        for zk in sessions:
            await zk.close()
    else:
        await asyncio.gather(*(member.close() for member in joined))


# -- the controller ------------------------------------------------------------------------


@dataclass(frozen=True)
class Subject:
    label: str
    kind: str
    """``sessions`` or ``members``."""
    release: Path | None
    """The directory holding the ``aio_cluster`` measured (None: this one)."""


def start(
    args: argparse.Namespace, cluster: LocalCluster, topic: str, subject: Subject
) -> subprocess.Popen[str]:
    """The worker process of ``subject``, its stdin and stdout piped."""
    env = None
    if subject.release is not None:
        paths = [str(subject.release), *filter(None, [os.environ.get("PYTHONPATH")])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    command = [sys.executable, __file__, "--worker", subject.kind, "--members", str(args.members)]
    command += ["--bootstrap", cluster.bootstrap, "--zookeeper", cluster.zookeeper]
    command += ["--topic", topic]
    return subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )


async def measure(
    args: argparse.Namespace, cluster: LocalCluster, topic: str, subject: Subject
) -> float:
    """ZooKeeper packets a second per member (or session) of ``subject`` over the window."""
    worker = start(args, cluster, topic, subject)
    assert worker.stdin is not None
    assert worker.stdout is not None
    try:
        line = await asyncio.to_thread(worker.stdout.readline)
        if line.strip() != "ready":
            raise RuntimeError(f"{subject.label}: the worker said {line!r}")
        await asyncio.sleep(SETTLE)
        before = await zookeeper_packets(cluster.zookeeper)
        started = time.perf_counter()
        await asyncio.sleep(args.window)
        packets = await zookeeper_packets(cluster.zookeeper) - before
        return packets / args.members / (time.perf_counter() - started)
    finally:
        worker.stdin.close()
        await asyncio.to_thread(worker.wait, 120)


async def main(args: argparse.Namespace) -> None:
    subjects = [Subject("pings alone (sessions pinging by the member's rule)", "sessions", None)]
    if args.baseline:
        subjects.append(Subject(f"members of {args.baseline} (baseline)", "members", args.baseline))
    subjects.append(Subject("members of this version", "members", None))
    rates: dict[str, list[float]] = {s.label: [] for s in subjects}
    async with LocalCluster(use_env=False) as cluster:
        topic = await create_topic(cluster.bootstrap, args.members)
        try:
            for round_ in range(args.rounds):
                for subject in subjects:
                    rates[subject.label].append(await measure(args, cluster, topic, subject))
                    print(
                        f"{time.strftime('%H:%M:%S')} round {round_ + 1}: {subject.label}: "
                        f"{rates[subject.label][-1]:.3f} packets/s per member"
                    )
        finally:
            await delete_topic(cluster.bootstrap, topic)
    reference = median(rates[subjects[0].label])
    rows = [
        [label, f"{median(found):.3f}", f"{median(found) / reference:.2f}"]
        for label, found in rates.items()
    ]
    title = (
        f"ZooKeeper packets a second per member, {args.members} members idle on one topic of "
        f"{args.members} partitions, {args.window:g} s windows, medians of {args.rounds} rounds"
    )
    table = show(title, ["what", "packets/s per member", "ratio to the pings alone"], rows)
    write_result(
        "idle.md",
        "An idle group",
        table,
        "Target: within 10 % of the pings alone (a ratio of at most 1.10).",
    )


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--members", type=int, default=20)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a directory holding another release's aio_cluster package: measured in the same "
        "run, before this one",
    )
    parser.add_argument("--worker", choices=["sessions", "members"], help=argparse.SUPPRESS)
    worker_addresses(parser)
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse()
    asyncio.run(serve(arguments) if arguments.worker else main(arguments))
