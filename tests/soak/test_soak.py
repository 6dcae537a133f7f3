"""The soak: members live for minutes through churn while a producer writes, and what a
long-lived member holds must not grow.

One member process lives through the whole run (`sampled_member`, which reports its resident
memory, open descriptors, threads and asyncio tasks) beside `OTHERS` member processes of the
chaos test's kind, which churn: a newcomer joins and an old member leaves gracefully, a member is
killed (SIGKILL) and replaced, frozen (SIGSTOP) past its session and thawed, or cut off from
ZooKeeper past its session and healed; and the long-lived member itself is cut off from ZooKeeper
for `SHORT_CUT` seconds, well within its session. A member (a churn worker, or at times the
long-lived one) is also cut off from Kafka, not from ZooKeeper, for `KAFKA_CUT` seconds, past
its ``fetch_timeout`` (`FETCH_TIMEOUT`), and healed: each member process reaches Kafka through
proxies of its own (`LocalCluster.kafka_proxies`), and the cut drops all its traffic to every
broker, connections kept open, as a network partition does. Where the member has a
``fetch_timeout`` (issue 53), the group then moves the partitions the cut member cannot read to
the others, and gives them back after the heal; the soak counts those that moved, as ZooKeeper
shows their owners at the heal, and prints it. Records are produced all along. After each
fault, once the group settled (every partition claimed, shares balanced, the population what it
was), one sample is taken: the long-lived member's own figures, its ZooKeeper session's watches
(``wchc``) and ephemeral nodes (``dump``) and its connections to ZooKeeper and to Kafka (through
proxies of its own), and the server's watches, ephemerals and connections (``mntr``). The
samples are taken at points alike (the same population, settled), so a figure that grows from
the first quarter of the run (after `warm_up`) to the last is a leak: see `TOLERANCES`. At the
end every record produced must have been consumed at least once.

It runs on a cluster of its own (the server's figures are then the soak's alone), started with
Java (the four-letter words it needs are allowed there), and only in ``nox -s soak``.
``AIO_CLUSTER_SOAK_MINUTES`` sets how long the churn lasts (default 15; ``nox -s soak --
--minutes 2``), ``AIO_CLUSTER_SOAK_SEED`` the random seed (printed).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import statistics
import sys
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from aio_cluster.local import FaultProxy, KafkaProxies, LocalCluster
from aio_cluster.local.probes import servers, zookeeper_monitor
from aio_cluster.zookeeper.client import NoNodeError, ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from churn import PARTITIONS, SESSION, Proxies, cut_past_session, registration, settled
from support import (
    Worker,
    create_topic,
    now,
    numbered_by,
    owners,
    producer_of,
    wait_until,
    worker_env,
)

MINUTES = float(os.environ.get("AIO_CLUSTER_SOAK_MINUTES", "15"))
OTHERS = 3
"""Member processes beside the long-lived one; each that goes is replaced."""
LONG_SESSION = 10.0
"""The long-lived member's session timeout, in seconds: its short cuts stay well within it."""
SHORT_CUT = 2.0
"""Seconds the long-lived member is cut off from ZooKeeper at a time."""
FETCH_TIMEOUT = 5.0
"""The members' ``fetch_timeout``, in seconds: short, so that a Kafka cut outlasts it thrice."""
KAFKA_CUT = 3 * FETCH_TIMEOUT
"""Seconds a member is cut off from Kafka at a time: the member marks what it cannot read one
``fetch_timeout`` into the cut, the mark settles half of one later, and the group moves those
partitions meanwhile."""
OPTIONS: dict[str, object] = {"fetch_timeout": FETCH_TIMEOUT}
"""The members' further options: the short ``fetch_timeout``, so that a cut member's partitions
move to the others during its cut."""
SAMPLED_MEMBER = Path(__file__).with_name("sampled_member.py")


@dataclass(frozen=True)
class Tolerance:
    """How much a figure's mean may exceed its first quarter's in the last quarter:
    ``first * (1 + relative) + absolute``."""

    relative: float
    absolute: float


TOLERANCES = {
    # The allocator keeps freed memory in its arenas and the member's buffers follow the load
    # (a fetch's records, a rebalance's state), so resident memory may wander a little (it did
    # not move in the runs tried: some 42 MiB throughout). Over a 15-minute run the quarters'
    # means lie some 9 minutes apart: a twentieth of 42 MiB then catches a leak of about
    # 250 KiB a minute, some 12 KiB per fault or 40 bytes per record.
    "rss_kib": Tolerance(0.05, 0),
    # Descriptors, threads and tasks are counted at a sample, and some are in flux then (a
    # ZooKeeper connection being made again after a cut, a Kafka connection opened for a
    # metadata refresh, a fetch per broker, the executor's threads started on demand up to
    # its bound): the means of the quarters smooth that; one leaked per fault would add tens.
    "fds": Tolerance(0, 2),
    "threads": Tolerance(0, 2),
    "tasks": Tolerance(0, 3),
    # At a settled point with the same population, the member's session holds the same nodes
    # and watches (its registration and its share of the claims); its proxy passes its one
    # ZooKeeper connection. One more, on average over a quarter, is a leak.
    "watches": Tolerance(0, 1),
    "ephemerals": Tolerance(0, 1),
    "connections": Tolerance(0, 1),
    # Its connections to the brokers (through its Kafka proxies), after Kafka cuts as well: a
    # connection of a cut left open would add one per cut.
    "kafka_connections": Tolerance(0, 1),
    # The server's totals, for every member: the same population at each sample.
    "zk_watch_count": Tolerance(0.10, 2),
    "zk_ephemerals_count": Tolerance(0, 1),
    "zk_num_alive_connections": Tolerance(0, 1),
}


def warm_up(seconds: float) -> float:
    """The samples of the first ``max(60 s, a fifth of the run)`` are left out of the
    comparison: the member's imports, caches and first rebalances settle then."""
    return max(60.0, seconds / 5)


async def four_letter_word(zookeeper: str, word: str) -> str:
    """A ZooKeeper server's answer to a four-letter word (the local cluster allows those used
    here; see `aio_cluster.local.config`)."""
    host, port = servers(zookeeper)[0]
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(word.encode())
        await writer.drain()
        return (await reader.read()).decode(errors="replace")
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def paths_by_session(text: str) -> Counter[str]:
    """The number of paths each session is listed with in ``wchc``'s answer, or in the
    ephemeral nodes part of ``dump``'s: a line ``0x<session>`` (maybe with a colon) followed by
    one indented line per path."""
    counts: Counter[str] = Counter()
    session = ""
    for line in text.splitlines():
        if line.startswith("0x"):
            session = line.split()[0].rstrip(":")
            counts[session] += 0
        elif line[:1].isspace() and line.strip().startswith("/") and session:
            counts[session] += 1
        else:
            session = ""
    return counts


class KafkaRoutes:
    """Each member process's own `KafkaProxies` (one of the cluster's ``kafka_proxies`` sets),
    held while the process runs, so that its Kafka traffic alone can be cut."""

    def __init__(self, cluster: LocalCluster) -> None:
        self._cluster = cluster
        self._held: dict[Worker, tuple[KafkaProxies, contextlib.AsyncExitStack]] = {}

    async def bootstrap(self, worker: Worker) -> str:
        """Take a set of proxies for ``worker``; returns the bootstrap servers to give it."""
        stack = contextlib.AsyncExitStack()
        proxies = await stack.enter_async_context(self._cluster.kafka_proxies())
        self._held[worker] = (proxies, stack)
        return proxies.bootstrap

    def __getitem__(self, worker: Worker) -> KafkaProxies:
        return self._held[worker][0]

    async def release(self, worker: Worker) -> None:
        """Stop ``worker``'s proxies (it is gone) and give their set back."""
        _, stack = self._held.pop(worker)
        await stack.aclose()

    async def stop(self) -> None:
        for worker in list(self._held):
            await self.release(worker)


class LongLived:
    """The long-lived member: a `sampled_member` process, reached through a `FaultProxy` to
    ZooKeeper and `KafkaProxies` of its own."""

    def __init__(self, out: Path, proxy: FaultProxy, routes: KafkaRoutes) -> None:
        self.worker = Worker(out)
        self.worker.mode = "auto"
        self.proxy = proxy
        self.routes = routes

    @property
    def kafka(self) -> KafkaProxies:
        return self.routes[self.worker]

    async def start(self, topic: str, group: str) -> None:
        bootstrap = await self.routes.bootstrap(self.worker)
        arguments = (bootstrap, self.proxy.address, topic, group, str(self.worker.out))
        self.worker.process = await asyncio.create_subprocess_exec(
            *(sys.executable, str(SAMPLED_MEMBER), *arguments, "auto", str(LONG_SESSION)),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=worker_env(OPTIONS),
        )
        line = await self._line()
        assert line == "joined", f"the long-lived member did not join: {line!r}"

    async def _line(self) -> str:
        process = self.worker.process
        assert process is not None
        assert process.stdout is not None
        return (await asyncio.wait_for(process.stdout.readline(), 60)).decode().strip()

    async def sample(self) -> dict[str, int]:
        """The process's own figures (see `sampled_member`)."""
        process = self.worker.process
        assert process is not None
        assert process.stdin is not None
        process.stdin.write(b"\n")
        await process.stdin.drain()
        figures: dict[str, int] = json.loads(await self._line())
        return figures


async def zookeeper_figures(
    cluster: LocalCluster, zk: ZooKeeper, layout: GroupLayout, member: LongLived
) -> dict[str, int]:
    """The long-lived member's session's watches and ephemerals, its connections to ZooKeeper
    and to Kafka, and the server's totals."""
    member_id = await registration(zk, layout, member.worker)
    assert member_id is not None, "the long-lived member is not registered"
    session = f"0x{(await zk.get(layout.member(member_id)))[1].ephemeral_owner:x}"
    watches = paths_by_session(await four_letter_word(cluster.zookeeper, "wchc"))
    dump = await four_letter_word(cluster.zookeeper, "dump")
    ephemerals = paths_by_session(dump.partition("ephemeral nodes dump")[2])
    totals = await zookeeper_monitor(cluster.zookeeper)
    return {
        "watches": watches[session],
        "ephemerals": ephemerals[session],
        "connections": member.proxy.connections,
        "kafka_connections": member.kafka.connections,
        **{name: int(totals[name]) for name in TOLERANCES if name.startswith("zk_")},
    }


def grown(samples: list[dict[str, int]]) -> dict[str, tuple[float, float, float]]:
    """The figures whose last quarter's mean exceeds the first quarter's beyond their
    `TOLERANCES`: name -> (first quarter's mean, last quarter's mean, the bound)."""
    quarter = len(samples) // 4
    found: dict[str, tuple[float, float, float]] = {}
    for name, tolerance in TOLERANCES.items():
        first = statistics.fmean(sample[name] for sample in samples[:quarter])
        last = statistics.fmean(sample[name] for sample in samples[-quarter:])
        bound = first * (1 + tolerance.relative) + tolerance.absolute
        if last > bound:
            found[name] = (first, last, bound)
    return found


def table(samples: list[dict[str, int]], judged: list[dict[str, int]]) -> str:
    """Each figure's first, last and largest sample, and the means of the judged samples' first
    and last quarters."""
    quarter = max(len(judged) // 4, 1)
    lines = [f"{'figure':26} {'first':>9} {'last':>9} {'max':>9} {'1st q':>11} {'last q':>11}"]
    for name in TOLERANCES:
        values = [sample[name] for sample in samples]
        first = statistics.fmean(sample[name] for sample in judged[:quarter])
        last = statistics.fmean(sample[name] for sample in judged[-quarter:])
        lines.append(
            f"{name:26} {values[0]:>9} {values[-1]:>9} {max(values):>9} {first:>11.1f} "
            f"{last:>11.1f}"
        )
    return "\n".join(lines)


@dataclass(frozen=True)
class KafkaCut:
    """One member's cut from Kafka: whether it was the long-lived member, how long it lasted
    (seconds), how many partitions the member owned as it began, and how many of those another
    member owned as it healed."""

    long_lived: bool
    seconds: float
    owned: int
    moved: int


def kafka_cut_summary(cuts: list[KafkaCut]) -> str:
    """What the Kafka cuts did, in a line."""
    setting = f"fetch_timeout {FETCH_TIMEOUT:g} s"
    if not cuts:
        return f"kafka cuts: none ({setting})"
    seconds = [cut.seconds for cut in cuts]
    return (
        f"kafka cuts: {len(cuts)} ({sum(cut.long_lived for cut in cuts)} of the long-lived "
        f"member), {min(seconds):.1f}-{max(seconds):.1f} s each, {sum(seconds):.0f} s in all "
        f"({setting}); partitions moved away from the cut member by the heal: "
        f"{sum(cut.moved for cut in cuts)} of the {sum(cut.owned for cut in cuts)} it owned "
        f"(per cut: {', '.join(f'{cut.moved}/{cut.owned}' for cut in cuts)})"
    )


@pytest_asyncio.fixture(scope="module")
async def soak_cluster() -> AsyncIterator[LocalCluster]:
    """A cluster of the soak's own: the server's figures then count the soak's members only."""
    # A set of Kafka proxies for each member process alive at once: the long-lived one, the
    # others, and a newcomer that joins before the member it replaces leaves.
    async with LocalCluster(use_env=False, kafka_proxies=OTHERS + 2) as started:
        if started.mode != "java":
            pytest.skip("the soak reads ZooKeeper's wchc and dump, allowed where Java starts it")
        yield started


pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.soak,
    pytest.mark.own_cluster,
    pytest.mark.timeout(MINUTES * 60 + 600),
]


async def test_a_long_lived_member_holds_no_more_after_minutes_of_churn(
    soak_cluster: LocalCluster, tmp_path: Path
) -> None:
    cluster = soak_cluster
    seed = int(os.environ.get("AIO_CLUSTER_SOAK_SEED", str(random.randrange(2**32))))
    rng = random.Random(seed)
    topic = await create_topic(cluster.bootstrap, PARTITIONS)
    group = f"soak-{seed}"
    layout = GroupLayout(group, topic)
    proxies = Proxies(cluster)
    others: list[Worker] = []
    gone: list[Worker] = []
    produced = 0
    faults: Counter[str] = Counter()
    samples: list[tuple[float, dict[str, int]]] = []
    kafka_cuts: list[KafkaCut] = []

    async with contextlib.AsyncExitStack() as stack:
        zk = ZooKeeper(cluster.zookeeper, session_timeout=10.0)
        await zk.start()
        stack.push_async_callback(zk.close)
        producer = await stack.enter_async_context(producer_of(cluster))
        produce = numbered_by(producer, topic)
        proxy = FaultProxy(cluster.zookeeper)
        await proxy.start()
        stack.push_async_callback(proxy.stop)
        stack.push_async_callback(proxies.stop)
        routes = KafkaRoutes(cluster)
        stack.push_async_callback(routes.stop)
        long_lived = LongLived(tmp_path / "long-lived.txt", proxy, routes)

        def consumed() -> Counter[str]:
            everyone = [long_lived.worker, *others, *gone]
            return Counter(key for worker in everyone for key in worker.consumed_keys())

        async def join() -> None:
            worker = Worker(tmp_path / f"worker{len(others) + len(gone)}.txt")
            zookeeper = await proxies.address(worker)
            bootstrap = await routes.bootstrap(worker)
            mode = rng.choice(["auto", "manual"])
            await worker.start(
                *(cluster, topic, group, mode, SESSION),
                zookeeper=zookeeper,
                bootstrap=bootstrap,
                options=OPTIONS,
            )
            others.append(worker)

        async def cut_from_kafka(worker: Worker) -> None:
            """Drop all of ``worker``'s Kafka traffic for `KAFKA_CUT` seconds, then heal;
            note which of its partitions another member owned by then."""
            member = await registration(zk, layout, worker)
            before = await owners(zk, layout, range(PARTITIONS))
            owned = {p for p, owner in before.items() if owner == member}
            began = now()
            routes[worker].drop()
            try:
                # The fault itself: a cut of this length, past the member's fetch_timeout.
                await asyncio.sleep(KAFKA_CUT)
                after = await owners(zk, layout, range(PARTITIONS))
            finally:
                routes[worker].forward()
            moved = {p for p in owned if after.get(p, member) != member}
            kafka_cuts.append(
                KafkaCut(worker is long_lived.worker, now() - began, len(owned), len(moved))
            )

        async def gone_from_zookeeper(worker: Worker) -> bool:
            return await registration(zk, layout, worker) is None

        async def freeze(worker: Worker) -> None:
            """SIGSTOP ``worker`` until its session expired, then SIGCONT."""
            assert worker.process is not None
            worker.process.send_signal(signal.SIGSTOP)
            try:
                await wait_until(
                    lambda: gone_from_zookeeper(worker), timeout=60, what="the frozen expiry"
                )
            finally:
                worker.process.send_signal(signal.SIGCONT)

        async def group_settled() -> bool:
            """Settled, and the long-lived member connected to ZooKeeper (after a short cut it
            may still be making its connection again): the samples are then taken alike."""
            everyone = [long_lived.worker, *others]
            members = [await registration(zk, layout, worker) for worker in everyone]
            return proxy.connections > 0 and await settled(zk, layout, members)

        async def feed() -> None:
            """Records at a steady pace until cancelled: the members consume through every
            fault."""
            nonlocal produced
            while True:
                await produce(produced, 10)
                produced += 10
                await asyncio.sleep(0.1)

        async def sample() -> None:
            try:
                figures = await zookeeper_figures(cluster, zk, layout, long_lived)
            except NoNodeError:
                return  # a node read went meanwhile (a member's share moved): the next round
            samples.append((now(), {**await long_lived.sample(), **figures}))

        await long_lived.start(topic, group)
        stack.callback(long_lived.worker.kill)
        for _ in range(OTHERS):
            await join()
        feeding = asyncio.create_task(feed())
        began = now()
        try:
            while now() - began < MINUTES * 60:
                action = rng.choice(["replace", "kill", "freeze", "cut", "short cut", "kafka cut"])
                faults[action] += 1
                if action == "replace":
                    await join()
                    leaving = others.pop(rng.randrange(len(others) - 1))
                    await leaving.leave()
                    await routes.release(leaving)
                    gone.append(leaving)
                elif action == "kill":
                    killed = others.pop(rng.randrange(len(others)))
                    killed.kill()
                    await killed.reap()
                    await routes.release(killed)
                    gone.append(killed)
                    await join()
                elif action == "freeze":
                    await freeze(rng.choice(others))
                elif action == "cut":
                    await cut_past_session(
                        proxies, zk, layout, rng.choice(others), refuse=rng.random() < 0.5
                    )
                elif action == "kafka cut":
                    await cut_from_kafka(rng.choice([long_lived.worker, *others]))
                else:
                    if rng.random() < 0.5:
                        proxy.cut()
                    else:
                        proxy.drop()
                    # The fault itself: a cut of this length, within the member's session.
                    await asyncio.sleep(SHORT_CUT)
                    proxy.forward()
                await wait_until(group_settled, timeout=90, what=f"the group settled ({seed})")
                await sample()
        finally:
            feeding.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await feeding
            for worker in others:
                worker.kill()
                await worker.reap()
        await wait_until(
            lambda: len(consumed()) >= produced,
            timeout=120,
            what=f"all {produced} records consumed (seed {seed})",
        )
        await long_lived.worker.leave()

    counts = consumed()
    after = began + warm_up(MINUTES * 60)
    judged = [figures for taken, figures in samples if taken >= after]
    print(
        f"seed {seed}: {MINUTES:g} minutes, faults {dict(faults)}, {produced} records, "
        f"{sum(1 for n in counts.values() if n > 1)} consumed more than once; {len(samples)} "
        f"samples, {len(judged)} judged (after {warm_up(MINUTES * 60):.0f} s of warm-up)"
    )
    print(kafka_cut_summary(kafka_cuts))
    if samples:
        print(table([figures for _, figures in samples], judged or [samples[-1][1]]))
    assert set(counts) >= {f"k{i}" for i in range(produced)}, f"records lost (seed {seed})"
    assert len(judged) >= 8, f"{len(judged)} samples after the warm-up: too few to judge growth"
    growth = grown(judged)
    assert not growth, f"grew beyond the tolerance (first quarter, last quarter, bound): {growth}"
