"""Rebalancing at scale: P partitions, M members spread over several processes; the time until
the group settles after one more member joins and after it leaves gracefully, the partitions
that changed owner, and the requests ZooKeeper received meanwhile.

The members live in ``--processes`` worker processes (each an asyncio loop hosting its share of
the members, driven by commands on its stdin), so the group coordinates across processes as it
would in production. The controller reads the members' claims from the workers, never from
ZooKeeper, so that its own reads do not count: the group has settled when the claims are
complete, disjoint and balanced over exactly the live members (and, for the range and
round-robin strategies, equal to their assignment). ZooKeeper's requests are the growth of its
``mntr`` ``zk_packets_received`` over the rebalance (the local ZooKeeper allows ``mntr``); it
includes the sessions' pings, a few per second for the whole group.

Targets (issue 7): with 1,000 partitions and 20 members, the 21st member's join moves at most
ceil(1000/21) = 48 partitions and settles in under 1 s; a graceful leave settles in under 1 s.
Results go to ``benchmarks/results/scale.md`` and ``scale.png``.

    python benchmarks/scale.py [--partitions P] [--members M] [--processes N] [--rounds R]
        [--strategy NAME] [--log FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import subprocess
import sys
import time
from collections.abc import Sequence

from common import (
    RESULTS,
    bar_chart,
    create_topic,
    fresh,
    markdown_table,
    median,
    table,
    zookeeper_packets,
)

from aio_cluster import ConsumerGroup, Strategy
from aio_cluster.assign.strategies import assign
from aio_cluster.local import LocalCluster

SETTLE_TIMEOUT = 120.0


# -- the worker: hosts members, answers commands ------------------------------------------


async def serve(args: argparse.Namespace) -> None:
    if args.log:
        logging.basicConfig(
            filename=args.log,
            level=logging.INFO,
            format="%(asctime)s.%(msecs)03d %(process)d %(name)s %(message)s",
            datefmt="%H:%M:%S",
        )
    members: dict[str, ConsumerGroup] = {}
    strategy = {} if args.strategy is None else {"strategy": args.strategy}

    def answer(value: object) -> None:
        sys.stdout.write(json.dumps(value) + "\n")
        sys.stdout.flush()

    try:
        while line := await asyncio.to_thread(sys.stdin.readline):
            command, _, argument = line.strip().partition(" ")
            if command != "status":
                logging.getLogger("scale").info("worker: %s", line.strip())
            if command == "join":
                joining = [
                    ConsumerGroup(
                        args.group,
                        args.bootstrap,
                        args.zookeeper,
                        args.topic,
                        register=False,
                        **strategy,
                    )
                    for _ in range(int(argument))
                ]
                await asyncio.gather(*(member.register() for member in joining))
                members.update((member.id, member) for member in joining)
                answer([member.id for member in joining])
            elif command == "leave":
                await members.pop(argument).close()
                answer(argument)
            elif command == "status":
                answer({member_id: m.claimed for member_id, m in members.items()})
    finally:
        await asyncio.gather(*(member.close() for member in members.values()))


# -- the controller --------------------------------------------------------------------------


class Worker:
    def __init__(self, args: argparse.Namespace, cluster: LocalCluster, topic: str, group: str):
        command = [
            sys.executable,
            __file__,
            "--worker",
            "--bootstrap",
            cluster.bootstrap,
            "--zookeeper",
            cluster.zookeeper,
            "--topic",
            topic,
            "--group",
            group,
        ]
        if args.strategy:
            command += ["--strategy", args.strategy]
        if args.log:
            command += ["--log", args.log]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self.members: list[str] = []

    async def ask(self, command: str) -> object:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        line = await asyncio.to_thread(self.process.stdout.readline)
        if not line:
            raise RuntimeError(f"worker died on {command!r}")
        return json.loads(line)

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


async def claims(workers: Sequence[Worker]) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for status in await asyncio.gather(*(w.ask("status") for w in workers)):
        assert isinstance(status, dict)
        found.update(status)
    return found


def settled(found: dict[str, list[int]], partitions: int, strategy: str | None) -> bool:
    owned = [p for ps in found.values() for p in ps]
    if len(owned) != partitions or set(owned) != set(range(partitions)):
        return False
    if strategy in (Strategy.RANGE.value, Strategy.ROUND_ROBIN.value):
        return found == assign(Strategy(strategy), range(partitions), list(found))
    sizes = [len(ps) for ps in found.values()]
    return max(sizes) - min(sizes) <= 1


async def settle(
    workers: Sequence[Worker], partitions: int, strategy: str | None
) -> dict[int, str]:
    deadline = time.perf_counter() + SETTLE_TIMEOUT
    while True:
        found = await claims(workers)
        if settled(found, partitions, strategy):
            return {p: member for member, ps in found.items() for p in ps}
        if time.perf_counter() > deadline:
            raise TimeoutError(f"the group did not settle in {SETTLE_TIMEOUT}s")
        await asyncio.sleep(0.005)


async def measure(
    args: argparse.Namespace, workers: Sequence[Worker], zookeeper: str, action: str, at: Worker
) -> tuple[float, int, int, str]:
    """Run ``action`` ("join 1" or "leave <id>") on a worker; return the seconds to settle, the
    partitions moved from live members, the ZooKeeper packets, and the member's id."""
    before = await settle(workers, args.partitions, args.strategy)
    packets = await zookeeper_packets(zookeeper)
    start = time.perf_counter()
    reply = await at.ask(action)
    after = await settle(workers, args.partitions, args.strategy)
    elapsed = time.perf_counter() - start
    packets = await zookeeper_packets(zookeeper) - packets
    member = reply[0] if isinstance(reply, list) else str(reply)
    gone = member if action.startswith("leave") else None
    moved = sum(1 for p, owner in before.items() if owner != gone and after[p] != owner)
    return elapsed, moved, packets, member


async def main(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.ERROR)
    async with LocalCluster() as cluster:
        topic = await create_topic(cluster.bootstrap, args.partitions)
        group = fresh("scale")
        workers = [Worker(args, cluster, topic, group) for _ in range(args.processes)]
        try:
            for index in range(args.members):  # one after another: a realistic group's history
                await workers[index % len(workers)].ask("join 1")
            await settle(workers, args.partitions, args.strategy)
            joins, leaves = [], []
            for round_ in range(args.rounds):
                at = workers[round_ % len(workers)]
                joins.append(await measure(args, workers, cluster.zookeeper, "join 1", at))
                member = joins[-1][3]
                leaves.append(
                    await measure(args, workers, cluster.zookeeper, f"leave {member}", at)
                )
                print(
                    f"{time.strftime('%H:%M:%S')} round {round_ + 1}: "
                    f"join {joins[-1][:3]} leave {leaves[-1][:3]}"
                )
        finally:
            for worker in workers:
                worker.stop()
    report(args, joins, leaves)


def report(
    args: argparse.Namespace,
    joins: list[tuple[float, int, int, str]],
    leaves: list[tuple[float, int, int, str]],
) -> None:
    headers = ["what", "settle ms (median)", "max", "partitions moved", "ZooKeeper packets"]
    rows = [
        [
            label,
            f"{median([r[0] for r in runs]) * 1000:.0f}",
            f"{max(r[0] for r in runs) * 1000:.0f}",
            f"{median([r[1] for r in runs]):.0f}",
            f"{median([r[2] for r in runs]):.0f}",
        ]
        for label, runs in (
            (f"member {args.members + 1} joins", joins),
            (f"member {args.members + 1} leaves", leaves),
        )
    ]
    strategy = args.strategy or "the default"
    title = (
        f"{args.partitions} partitions, {args.members} members in {args.processes} processes, "
        f"strategy {strategy}, {args.rounds} rounds, medians"
    )
    print(title)
    print(table(headers, rows))
    bound = -(-args.partitions // (args.members + 1))
    print(f"targets: a join moves <= {bound} and settles < 1000 ms; a leave settles < 1000 ms")
    command = "python benchmarks/scale.py " + " ".join(sys.argv[1:])
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    RESULTS.mkdir(exist_ok=True)
    name = f"scale-{args.strategy or 'default'}"
    (RESULTS / f"{name}.md").write_text(
        f"# Scale\n\n{title}.\n\n`{command.strip()}`, {when}\n\n"
        + markdown_table(headers, rows)
        + f"\n\nTargets: a join moves <= {bound} partitions and settles in < 1000 ms;"
        " a graceful leave settles in < 1000 ms.\n"
    )
    bar_chart(
        RESULTS / f"{name}.png",
        [row[0] for row in rows],
        [median([r[0] for r in runs]) * 1000 for runs in (joins, leaves)],
        "milliseconds to settle (median)",
        title,
    )


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--members", type=int, default=20)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--strategy", choices=[s.value for s in Strategy], default=None)
    parser.add_argument(
        "--log",
        help="append the members' INFO logs, timestamped, to this file (to see where a "
        "rebalance spends its time)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--zookeeper", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--group", help=argparse.SUPPRESS)
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse()
    asyncio.run(serve(arguments) if arguments.worker else main(arguments))
