"""Rebalancing at scale: P partitions, M members spread over several processes; the time until
the group settles after one more member joins and after it leaves gracefully, the partitions
that changed owner, the requests ZooKeeper received and the CPU seconds the group spent
meanwhile, and the time to build the group.

The members live in ``--processes`` worker processes (each an asyncio loop hosting its share of
the members, driven by commands on its stdin), so the group coordinates across processes as it
would in production. The controller reads the members' claims from the workers, never from
ZooKeeper, so that its own reads do not count: the group has settled when the claims are
complete, disjoint and balanced over exactly the live members (and, for the range and
round-robin strategies, equal to their assignment). ZooKeeper's requests are the growth of its
``mntr`` ``zk_packets_received`` over the rebalance (the local ZooKeeper allows ``mntr``); it
includes the sessions' pings, a few per second for the whole group. The CPU seconds are the
growth of the workers' own resource usage (user + system, summed over them), raw and less what
the settled group spends at rest in as long (the median of its rate over three seconds
watched before each change): on a loaded 2-core machine a wall-clock figure mostly measures the
load, while CPU seconds and requests are what a group of one member per machine would pay. The
controller does not poll the workers for their claims: each answers when its claims change, so
that watching the group costs it almost nothing.

``--baseline DIR`` measures, in the same run and on the same cluster, the ``aio_cluster`` package
found in DIR first (e.g. ``git archive <commit> aio_cluster | tar -x -C DIR``), then this one,
and gives each figure's ratio to the baseline's.

Targets (issue 7): with 1,000 partitions and 20 members, the 21st member's join moves at most
ceil(1000/21) = 48 partitions and settles in under 1 s; a graceful leave settles in under 1 s.
Results go to ``benchmarks/results/scale-<strategy>.md`` and ``.png`` (``default`` for the
default strategy), or ``scale-<P>x<M>[-<strategy>]`` at other sizes.

    python benchmarks/scale.py [--partitions P] [--members M] [--processes N] [--rounds R]
        [--strategy NAME] [--log FILE] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
from common import (
    RESULTS,
    bar_chart,
    create_topic,
    delete_topic,
    fresh,
    markdown_table,
    median,
    table,
    worker_addresses,
    zookeeper_packets,
)

from aio_cluster import ConsumerGroup, Strategy
from aio_cluster.assign.strategies import assign
from aio_cluster.local import LocalCluster

DEFAULT_PARTITIONS = 1000
DEFAULT_MEMBERS = 20
SETTLE_TIMEOUT = 120.0
IDLE_WINDOW = 3.0
"""Seconds the settled group is watched before each change, for its idle CPU rate."""
WATCH_MS = 250
"""How long a worker holds a claims question when nothing changed (see `settle`)."""
CHECK_INTERVAL = 0.01
"""How often a worker holding a claims question looks at its members' claims."""


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
    answered: list[object] | None = None
    """What `held` saw when the last ``claims`` command answered."""
    strategy = {} if args.strategy is None else {"strategy": args.strategy}

    def answer(value: object) -> None:
        sys.stdout.write(json.dumps(value) + "\n")
        sys.stdout.flush()

    lines: asyncio.Queue[str] = asyncio.Queue()
    """The commands read ahead, so that a command waiting on claims ends when another comes."""

    async def read() -> None:
        while line := await asyncio.to_thread(sys.stdin.readline):
            await lines.put(line)
        await lines.put("")

    reading = asyncio.ensure_future(read())
    try:
        while line := await lines.get():
            command, _, argument = line.strip().partition(" ")
            if command != "claims":
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
            elif command == "claims":
                # The members' claims as soon as they change, or None after ``argument`` ms
                # without a change or once another command comes ("claims 0": the claims at once):
                # the controller waits here rather than polling, so that watching costs the
                # group a cheap look every 10 ms, not a round trip.
                deadline = time.perf_counter() + int(argument) / 1000
                while True:
                    looked = [held(m) for m in members.values()]
                    if looked != answered or time.perf_counter() >= deadline or lines.qsize():
                        break
                    await asyncio.sleep(CHECK_INTERVAL)
                if looked == answered and argument != "0":
                    answer(None)  # unchanged: the controller keeps the last answer
                    continue
                answered = looked
                answer({member_id: m.claimed for member_id, m in members.items()})
            elif command == "cpu":
                usage = resource.getrusage(resource.RUSAGE_SELF)
                answer(usage.ru_utime + usage.ru_stime)
    finally:
        reading.cancel()  # its thread ends with stdin
        await asyncio.gather(*(member.close() for member in members.values()))


def held(member: ConsumerGroup) -> object:
    """What ``member`` holds, cheaply: its claims' keys, read from the member's inside (a
    release without them: ``claimed``). ``claimed`` names and sorts every partition, which
    looked at every 10 ms by ten members costs more than the rebalance measured."""
    states = getattr(getattr(member, "_member", None), "states", None)
    return member.claimed if states is None else frozenset(states.claims)


# -- the controller --------------------------------------------------------------------------


class Worker:
    def __init__(
        self,
        args: argparse.Namespace,
        cluster: LocalCluster,
        topic: str,
        group: str,
        release: Path | None,
    ):
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
        env = None
        if release is not None:
            paths = [str(release), *filter(None, [os.environ.get("PYTHONPATH")])]
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1, env=env
        )
        self.members: list[str] = []
        self._read: asyncio.Future[None] | None = None
        """Done once the answer to the last question asked was read."""

    async def ask(self, command: str) -> object:
        """Ask at once, even while an earlier question waits (a ``claims`` question then ends
        early); the answers are read in the order asked."""
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        before, self._read = self._read, asyncio.get_running_loop().create_future()
        read = self._read
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        try:
            if before is not None:
                await before
            line = await asyncio.to_thread(self.process.stdout.readline)
        finally:
            read.set_result(None)
        if not line:
            raise RuntimeError(f"worker died on {command!r}")
        return json.loads(line)

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


async def cpu(workers: Sequence[Worker]) -> float:
    """The CPU seconds the workers used so far, summed."""
    used = await asyncio.gather(*(w.ask("cpu") for w in workers))
    return sum(float(str(seconds)) for seconds in used)


def settled(found: dict[str, list[int]], partitions: int, strategy: str | None) -> bool:
    owned = [p for ps in found.values() for p in ps]
    if len(owned) != partitions or set(owned) != set(range(partitions)):
        return False
    if strategy in (Strategy.RANGE.value, Strategy.ROUND_ROBIN.value):
        return found == assign(Strategy(strategy), range(partitions), list(found))
    sizes = [len(ps) for ps in found.values()]
    return max(sizes) - min(sizes) <= 1


async def watch(
    workers: Sequence[Worker], enough: Callable[[dict[str, list[int]]], bool]
) -> tuple[dict[str, list[int]], float, float, float]:
    """Watch the members' claims until ``enough(claims)``; return them, when it was seen, and
    the workers' CPU seconds so far with when they were read (at once: the question ends the
    workers' waits).

    Each worker is asked for its members' claims and answers when they change (or every
    `WATCH_MS` anyway), so the group is watched without being polled: polling ten workers every
    few milliseconds cost the group more CPU than a join does.
    """
    found: dict[Worker, dict[str, list[int]]] = {}
    changed = asyncio.Event()
    seen = False

    async def ask(worker: Worker, wait_ms: int) -> None:
        while not seen:
            claims = await worker.ask(f"claims {wait_ms}")
            if claims is not None:  # None: unchanged since the worker's last answer
                assert isinstance(claims, dict)
                found[worker] = claims
            changed.set()
            wait_ms = WATCH_MS

    async with anyio.create_task_group() as watching:
        for worker in workers:
            watching.start_soon(ask, worker, 0)
        with anyio.fail_after(SETTLE_TIMEOUT):
            while True:
                await changed.wait()
                changed.clear()
                everyone = {m: ps for claims in found.values() for m, ps in claims.items()}
                if len(found) == len(workers) and enough(everyone):
                    at = time.perf_counter()
                    seen = True
                    used = await cpu(workers)
                    read = time.perf_counter()
                    break
    return everyone, at, used, read


async def settle(
    workers: Sequence[Worker], partitions: int, strategy: str | None
) -> tuple[dict[int, str], float]:
    """The owner of each partition once the group has settled, and when it was seen settled."""
    found, at, _used, _read = await watch(
        workers, lambda claims: settled(claims, partitions, strategy)
    )
    return {p: member for member, ps in found.items() for p in ps}, at


@dataclass(frozen=True)
class Change:
    """One join or leave, measured."""

    seconds: float
    moved: int
    packets: int
    cpu: float
    """CPU seconds the group spent from the change until it was seen settled."""
    window: float
    """The seconds over which ``cpu`` was measured."""
    idle: float
    """CPU seconds a second the settled group spent just before (see `measure`)."""
    member: str


@dataclass(frozen=True)
class Run:
    """One release's figures."""

    label: str
    build: float
    joins: list[Change]
    leaves: list[Change]


async def measure(
    args: argparse.Namespace, workers: Sequence[Worker], zookeeper: str, action: str, at: Worker
) -> Change:
    """Run ``action`` ("join 1" or "leave <id>") on a worker; return the seconds to settle, the
    partitions moved from live members, the ZooKeeper packets, the group's CPU seconds and the
    member's id."""
    before, _ = await settle(workers, args.partitions, args.strategy)
    # The settled group's own rate (its fetch loops, the sessions' pings, and the watching as
    # `settle` watches): taken off, so that the figure is what the change cost.
    idle = await cpu(workers)
    watched = time.perf_counter()
    _claims, _at, idled, read = await watch(
        workers, lambda _claims: time.perf_counter() - watched >= IDLE_WINDOW
    )
    idle = (idled - idle) / (read - watched)
    packets = await zookeeper_packets(zookeeper)
    used = await cpu(workers)
    start = time.perf_counter()
    reply = await at.ask(action)
    found, at_rest, spent, read = await watch(
        workers, lambda claims: settled(claims, args.partitions, args.strategy)
    )
    after = {p: owner for owner, ps in found.items() for p in ps}
    used = spent - used
    window = read - start
    packets = await zookeeper_packets(zookeeper) - packets
    member = reply[0] if isinstance(reply, list) else str(reply)
    gone = member if action.startswith("leave") else None
    moved = sum(1 for p, owner in before.items() if owner != gone and after[p] != owner)
    return Change(at_rest - start, moved, packets, used, window, idle, member)


async def run(
    args: argparse.Namespace, cluster: LocalCluster, release: Path | None, label: str
) -> Run:
    """Build a group of the release in ``release`` (None: this one) on a fresh topic, then
    measure its joins and leaves."""
    topic = await create_topic(cluster.bootstrap, args.partitions)
    group = fresh("scale")
    workers = [Worker(args, cluster, topic, group, release) for _ in range(args.processes)]
    try:
        started = time.perf_counter()
        if args.build == "together":  # a deploy: every member starts at once
            shares = [len(range(i, args.members, len(workers))) for i in range(len(workers))]
            await asyncio.gather(
                *(worker.ask(f"join {n}") for worker, n in zip(workers, shares, strict=True) if n)
            )
        else:
            for index in range(args.members):  # one after another: a group's long history
                await workers[index % len(workers)].ask("join 1")
        await settle(workers, args.partitions, args.strategy)
        build = time.perf_counter() - started
        joins: list[Change] = []
        leaves: list[Change] = []
        for round_ in range(args.rounds):
            at = workers[round_ % len(workers)]
            joins.append(await measure(args, workers, cluster.zookeeper, "join 1", at))
            member = joins[-1].member
            leaves.append(await measure(args, workers, cluster.zookeeper, f"leave {member}", at))
            print(
                f"{time.strftime('%H:%M:%S')} {label} round {round_ + 1}: "
                f"join {joins[-1]} leave {leaves[-1]}"
            )
    finally:
        for worker in workers:
            worker.stop()
        await delete_topic(cluster.bootstrap, topic)
    return Run(label, build, joins, leaves)


async def main(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.ERROR)
    async with LocalCluster() as cluster:
        runs = []
        if args.baseline:
            runs.append(await run(args, cluster, Path(args.baseline), "baseline"))
        runs.append(await run(args, cluster, None, "this version"))
    report(args, runs)


def figures(changes: list[Change], idle: float) -> list[float]:
    """Settle ms (median and max), partitions moved, ZooKeeper packets, and the group's CPU ms:
    raw, and above ``idle`` (CPU seconds a second) over as long (medians)."""
    return [
        median([c.seconds for c in changes]) * 1000,
        max(c.seconds for c in changes) * 1000,
        median([c.moved for c in changes]),
        median([c.packets for c in changes]),
        median([c.cpu for c in changes]) * 1000,
        median([c.cpu - idle * c.window for c in changes]) * 1000,
    ]


def idle_rate(result: Run) -> float:
    """The settled group's CPU seconds a second, the median of those measured before each
    change (one window alone varies too much with a hundred members' fetch loops)."""
    return median([c.idle for c in [*result.joins, *result.leaves]])


def report(args: argparse.Namespace, runs: list[Run]) -> None:
    headers = [
        "release",
        "what",
        "settle ms (median)",
        "max",
        "moved",
        "ZK packets",
        "group CPU ms",
        "above idle",
    ]
    # group CPU ms: summed over the workers, raw and above their idle rate (see `measure`).
    ratios = len(runs) > 1
    if ratios:
        headers += ["settle ratio", "packets ratio", "CPU ratio", "above idle ratio"]
    rows = []
    for result in runs:
        for label, changes, base in (
            (f"member {args.members + 1} joins", result.joins, runs[0].joins),
            (f"member {args.members + 1} leaves", result.leaves, runs[0].leaves),
        ):
            mine = figures(changes, idle_rate(result))
            row = [result.label, label, *(f"{f:.0f}" for f in mine)]
            if ratios:
                theirs = figures(base, idle_rate(runs[0]))
                row += [f"{mine[i] / theirs[i]:.2f}" if theirs[i] else "-" for i in (0, 3, 4, 5)]
            rows.append(row)
    strategy = args.strategy or "the default"
    title = (
        f"{args.partitions} partitions, {args.members} members in {args.processes} processes, "
        f"strategy {strategy}, {args.rounds} rounds, medians"
    )
    builds = ", ".join(f"{r.label} {r.build:.1f} s" for r in runs)
    idles = ", ".join(f"{r.label} {idle_rate(r) * 1000:.0f} ms/s" for r in runs)
    print(title)
    print(table(headers, rows))
    print(f"building the group ({args.build}): {builds}")
    print(f"the settled group's idle CPU (taken off for 'above idle'): {idles}")
    bound = -(-args.partitions // (args.members + 1))
    print(f"targets: a join moves <= {bound} and settles < 1000 ms; a leave settles < 1000 ms")
    command = "python benchmarks/scale.py " + " ".join(sys.argv[1:])
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    RESULTS.mkdir(exist_ok=True)
    name = f"scale-{args.strategy or 'default'}"
    if (args.partitions, args.members) != (DEFAULT_PARTITIONS, DEFAULT_MEMBERS):
        name = f"scale-{args.partitions}x{args.members}"
        if args.strategy:
            name += f"-{args.strategy}"
    if args.build == "together":
        name += "-together"
    (RESULTS / f"{name}.md").write_text(
        f"# Scale\n\n{title}.\n\n`{command.strip()}`, {when}\n\n"
        + markdown_table(headers, rows)
        + f"\n\nBuilding the group ({args.build}): {builds}. The group CPU is the worker"
        f" processes' (user + system) from the change until settled; the settled group's idle"
        f" CPU, taken off it over as long for 'above idle': {idles}."
        + f"\n\nTargets: a join moves <= {bound} partitions and settles in < 1000 ms;"
        " a graceful leave settles in < 1000 ms.\n"
    )
    bar_chart(
        RESULTS / f"{name}.png",
        [f"{row[0]}: {row[1]}" for row in rows],
        [float(row[2]) for row in rows],
        "milliseconds to settle (median)",
        title,
    )


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS)
    parser.add_argument("--members", type=int, default=DEFAULT_MEMBERS)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--strategy", choices=[s.value for s in Strategy], default=None)
    parser.add_argument(
        "--build",
        choices=["one-by-one", "together"],
        default="one-by-one",
        help="how the group is built before the measured changes: its members joining one "
        "after another, or all starting at once (a deploy)",
    )
    parser.add_argument(
        "--log",
        help="append the members' INFO logs, timestamped, to this file (to see where a "
        "rebalance spends its time)",
    )
    parser.add_argument(
        "--baseline",
        help="a directory holding another release's aio_cluster package: measured first, in "
        "the same run, and each figure given as a ratio to it",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    worker_addresses(parser)
    parser.add_argument("--group", help=argparse.SUPPRESS)
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse()
    asyncio.run(serve(arguments) if arguments.worker else main(arguments))
