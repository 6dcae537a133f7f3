"""What the exactly-once tests share: pipeline member processes (`PipelineWorker`, running
``tests/pipeline_worker.py``), the output topic as a reader sees it (`Outputs`), a steady feed
of numbered input records, and the churn a pipeline group goes through (`churn_pipeline`):
members SIGKILLed and restarted (a named one under its name), frozen past their session and
thawed, cut off from ZooKeeper past their session, joining and leaving, while records flow."""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import anyio
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from churn import Proxies, cut_past_session, put_down, registration
from support import Worker, add_topic, producer_of, wait_until, within

PIPELINE_WORKER = Path(__file__).with_name("pipeline_worker.py")

SESSION = 3.0
"""The pipeline members' session timeout, in seconds."""

Isolation = Literal["read_committed", "read_uncommitted"]

Fault = Literal["kill", "restart", "freeze", "cut", "join", "leave"]
"""What `churn_pipeline` does to the group: ``kill`` SIGKILLs a member and starts another in its
place; ``restart`` SIGKILLs the named member and starts it again under its name at once (before
its session expired: the newcomer takes the name and its partitions over); ``freeze`` SIGSTOPs
a member until its registration is gone, then SIGCONTs it (a zombie whose partitions moved);
``cut`` drops or refuses a member's ZooKeeper traffic until its session expired, then heals;
``join`` starts one more member; ``leave`` stops one gracefully (SIGTERM)."""

FAULTS: tuple[Fault, ...] = ("kill", "restart", "freeze", "cut", "join", "leave")

EXACTLY_ONCE_OR_NOT = pytest.mark.parametrize(
    ("modes", "exactly_once"),
    [
        (("transactions", "process"), True),
        (("plain", "plain-process"), False),
    ],
    ids=["exactly-once", "at-least-once"],
)
"""The two kinds of pipeline group a churn test runs (`churn_new_pipeline`): members in turn on
``transactions()`` and ``process_transactional()`` (exactly once), or members that write at
least once (``async for`` and ``process()``, a producer of their own)."""


class PipelineWorker(Worker):
    """A pipeline member process (see ``tests/pipeline_worker.py``): `Worker`'s leave, kill and
    reap, started by `start_pipeline`."""

    async def start_pipeline(
        self,
        cluster: LocalCluster,
        source: str,
        sink: str,
        group: str,
        mode: str,
        session: float = SESSION,
        *,
        name: str | None = None,
        grace: float = 0.0,
        zookeeper: str | None = None,
    ) -> None:
        """Start the member process and wait until it joined; ``mode`` as the worker's (see
        its module), ``zookeeper`` the address it is given (a `FaultProxy`'s)."""
        named = [] if name is None else [name, str(grace)]
        self.mode = mode
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(PIPELINE_WORKER),
            cluster.bootstrap,
            zookeeper or cluster.zookeeper,
            source,
            sink,
            group,
            mode,
            str(session),
            *named,
            stdout=asyncio.subprocess.PIPE,
        )
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), 60)
        assert line == b"joined\n", f"pipeline worker did not join: {line!r}"


@dataclass
class Outputs:
    """A topic as a reader with ``isolation`` sees it, from its start: how often each key came,
    and the ``from`` headers of each key's records (who wrote them, from which input)."""

    consumer: AIOKafkaConsumer
    partitions: list[TopicPartition]
    keys: Counter[str] = field(default_factory=Counter)
    origins: dict[str, list[str]] = field(default_factory=dict)

    async def read(self, timeout_ms: int = 200) -> int:
        """Read what the topic has past the last read (waiting up to ``timeout_ms`` for it);
        returns how many records came."""
        got = await self.consumer.getmany(*self.partitions, timeout_ms=timeout_ms)
        count = 0
        for records in got.values():
            for record in records:
                key = (record.key or b"").decode()
                self.keys[key] += 1
                header = dict(record.headers).get("from", b"").decode()
                self.origins.setdefault(key, []).append(header)
                count += 1
        return count

    async def to_end(self) -> None:
        """Read up to the end the reader sees now (under ``read_committed``, the last stable
        offset: no transaction is open below it)."""
        ends = await self.consumer.end_offsets(self.partitions)
        for tp, end in ends.items():
            while await self.consumer.position(tp) < end:
                await self.read()

    async def wait_for(self, keys: int, *, timeout: float, what: str) -> None:
        """Read until ``keys`` distinct keys came; fail the test after ``timeout`` seconds,
        printing first what every task of the loop waits on (the members' handlers, commits and
        dead letters: the one clue a rare stall leaves)."""

        async def enough() -> bool:
            await self.read(100)
            return len(self.keys) >= keys

        try:
            await within(wait_until(enough, timeout=2 * timeout), timeout, what)
        except AssertionError as exc:
            raise AssertionError(f"{exc} ({len(self.keys)} of {keys} keys came)") from None

    def duplicates(self) -> dict[str, list[str]]:
        """Key -> the ``from`` headers of each of its records, for the keys that came more than
        once."""
        return {key: self.origins[key] for key, count in self.keys.items() if count > 1}

    def missing(self, total: int) -> list[str]:
        """The keys ``k0`` ... ``k<total-1>`` that never came."""
        return [f"k{i}" for i in range(total) if f"k{i}" not in self.keys]


@contextlib.asynccontextmanager
async def outputs_of(
    bootstrap: str, topic: str, partitions: int, isolation: Isolation = "read_committed"
) -> AsyncIterator[Outputs]:
    """`Outputs` of ``topic`` (of ``partitions`` partitions) read with ``isolation``, for the
    block."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level=isolation,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        assigned = [TopicPartition(topic, number) for number in range(partitions)]
        consumer.assign(assigned)
        await consumer.seek_to_beginning(*assigned)
        yield Outputs(consumer, assigned)
    finally:
        await consumer.stop()


async def feed(
    producer: AIOKafkaProducer,
    topic: str,
    total: int,
    *,
    chunk: int,
    pause: float,
    hurry: asyncio.Event,
) -> None:
    """The numbered records ``k0`` ... (key ``k<i>``, value ``<i>``) to ``topic``, ``chunk`` of
    them each ``pause`` seconds (so that records flow through every fault), the rest at once
    when ``hurry`` is set."""
    for start in range(0, total, chunk):
        futures = [
            await producer.send(topic, key=f"k{i}".encode(), value=str(i).encode())
            for i in range(start, min(start + chunk, total))
        ]
        await asyncio.gather(*futures)
        with anyio.move_on_after(pause):
            await hurry.wait()


@dataclass
class Churned:
    """What `churn_pipeline` did and what the output holds."""

    seed: int
    faults: list[str]
    outputs: Counter[str]
    duplicates: dict[str, list[str]]
    missing: list[str]

    def summary(self) -> str:
        return (
            f"seed {self.seed}: faults {self.faults}; {sum(self.outputs.values())} output records "
            f"of {len(self.outputs)} keys, {len(self.duplicates)} keys more than once, "
            f"{len(self.missing)} missing"
        )


async def churn_pipeline(
    cluster: LocalCluster,
    zk: ZooKeeper,
    source: str,
    sink: str,
    group: str,
    tmp_path: Path,
    *,
    modes: Sequence[str],
    partitions: int,
    records: int,
    faults: Sequence[Fault],
    seed: int,
    chunk: int = 50,
    pause: float = 0.1,
) -> Churned:
    """Run three pipeline members (their modes ``modes`` in turn; the first named, a grace of
    5 s) from ``source`` to ``sink`` (of ``partitions`` partitions) while ``records`` numbered
    records are fed and ``faults`` happen one after another (in that order; a second between
    two); then wait until the output read with ``read_committed`` holds every input, let every
    member leave gracefully (each must end well: a zombie gives its partitions up, it does not
    die) and read the output to its end.
    Every member reaches ZooKeeper through a `FaultProxy` of its own."""
    rng = random.Random(seed)
    layout = GroupLayout(group, source)
    proxies = Proxies(cluster)
    live: list[PipelineWorker] = []
    dead: list[PipelineWorker] = []
    named = "pipeline-0"
    names: dict[PipelineWorker, str] = {}
    done: list[str] = []

    async def join(name: str | None = None) -> PipelineWorker:
        number = len(live) + len(dead)
        worker = PipelineWorker(tmp_path / f"pipeline{number}.txt")
        zookeeper = await proxies.address(worker)
        mode = modes[number % len(modes)]
        await worker.start_pipeline(
            cluster, source, sink, group, mode, name=name, grace=5.0, zookeeper=zookeeper
        )
        if name is not None:
            names[worker] = name
        live.append(worker)
        return worker

    def unnamed() -> PipelineWorker:
        return rng.choice([worker for worker in live if worker not in names])

    async def registered_again(worker: PipelineWorker) -> None:
        async def back() -> bool:
            return await registration(zk, layout, worker, names.get(worker)) is not None

        await wait_until(back, timeout=60, what=f"the member registered again (seed {seed})")

    async def freeze(worker: PipelineWorker) -> None:
        assert worker.process is not None
        worker.process.send_signal(signal.SIGSTOP)
        try:

            async def gone() -> bool:
                return await registration(zk, layout, worker) is None

            await wait_until(gone, timeout=60, what=f"the frozen member's expiry (seed {seed})")
        finally:
            worker.process.send_signal(signal.SIGCONT)
        await registered_again(worker)

    async def kill(worker: PipelineWorker) -> None:
        live.remove(worker)
        worker.kill()
        await worker.reap()
        dead.append(worker)

    hurry = asyncio.Event()
    async with producer_of(cluster) as producer:
        feeding = asyncio.create_task(
            feed(producer, source, records, chunk=chunk, pause=pause, hurry=hurry)
        )
        try:
            await join(named)
            for _ in range(2):
                await join()
            for planned in faults:
                fault = "join" if len(live) < 2 else planned
                if fault == "join":
                    await join()
                elif fault == "leave":
                    worker = unnamed()
                    live.remove(worker)
                    await worker.leave()
                    dead.append(worker)
                elif fault == "kill":
                    await kill(unnamed())
                    await join()
                elif fault == "restart":
                    (worker,) = [worker for worker in live if names.get(worker) == named]
                    await kill(worker)
                    await join(named)
                elif fault == "freeze":
                    await freeze(unnamed())
                else:
                    worker = unnamed()
                    await cut_past_session(proxies, zk, layout, worker, rng.random() < 0.5)
                    await registered_again(worker)
                done.append(fault)
                # Time for the group to go on between two faults, not a condition.
                await asyncio.sleep(1.0)
            hurry.set()
            await feeding
            async with outputs_of(cluster.bootstrap, sink, partitions) as outputs:
                await outputs.wait_for(
                    records, timeout=180, what=f"the output of all {records} inputs (seed {seed})"
                )
                for worker in list(live):
                    live.remove(worker)
                    await worker.leave()
                    dead.append(worker)
                await outputs.to_end()
                return Churned(
                    seed,
                    done,
                    outputs.keys,
                    outputs.duplicates(),
                    outputs.missing(records),
                )
        finally:
            hurry.set()
            feeding.cancel()
            await put_down(live, proxies)


async def churn_new_pipeline(
    cluster: LocalCluster,
    admin: AIOKafkaAdminClient,
    zk: ZooKeeper,
    group: str,
    tmp_path: Path,
    *,
    modes: Sequence[str],
    exactly_once: bool,
    partitions: int,
    records: int,
    faults: Sequence[Fault],
    seed: int,
) -> None:
    """`churn_pipeline` from a fresh input topic to a fresh output topic (of ``partitions``
    partitions each), then the check: every input came out, and with ``exactly_once`` each
    once. Without it nothing is checked of duplicates: at least once may write an input again,
    and does only when a kill or a cut lands between an output and its input's commit, which
    the faults' timing leaves to chance (the summary prints how many there were)."""
    source = await add_topic(admin, partitions, prefix="input")
    sink = await add_topic(admin, partitions, prefix="output")
    churned = await churn_pipeline(
        cluster,
        zk,
        source,
        sink,
        group,
        tmp_path,
        modes=modes,
        partitions=partitions,
        records=records,
        faults=faults,
        seed=seed,
    )
    print(churned.summary())
    assert not churned.missing, f"inputs without output: {churned.missing[:10]} (seed {seed})"
    if exactly_once:
        twice = list(churned.duplicates.items())[:5]
        assert not churned.duplicates, f"inputs written twice (seed {seed}): {twice}"
