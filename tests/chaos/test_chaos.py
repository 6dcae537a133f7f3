"""Chaos: member processes join, leave gracefully and die by SIGKILL at random while messages
are produced. Nothing may be lost; duplicates are allowed only around a kill (at least once).

Long by design, so it runs in its own nox session (``nox -s chaos``), not in the default suite.
``AIO_CLUSTER_CHAOS_ROUNDS`` sets the number of disruptions (default 12) and
``AIO_CLUSTER_CHAOS_SEED`` the random seed (printed on failure).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
from collections import Counter
from pathlib import Path

import pytest

from aio_cluster.local import LocalCluster

from conftest import MakeTopic, Produce
from support import Worker, wait_until

pytestmark = [pytest.mark.asyncio, pytest.mark.chaos]


async def test_random_joins_leaves_and_kills_lose_nothing(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
    tmp_path: Path,
) -> None:
    rounds = int(os.environ.get("AIO_CLUSTER_CHAOS_ROUNDS", "12"))
    seed = int(os.environ.get("AIO_CLUSTER_CHAOS_SEED", str(random.randrange(2**32))))
    rng = random.Random(seed)
    topic = await make_topic(6)
    live: list[Worker] = []
    dead: list[Worker] = []
    produced = 0
    kills = 0

    def consumed() -> Counter[str]:
        return Counter(key for worker in live + dead for key in worker.consumed_keys())

    async def join() -> None:
        worker = Worker(tmp_path / f"worker{len(live) + len(dead)}.txt")
        await worker.start(cluster, topic, group_name, rng.choice(["auto", "manual"]), 3.0)
        live.append(worker)

    try:
        for _ in range(3):
            await join()
        for _ in range(rounds):
            produced += sum((await produce(topic, 200, start=produced)).values())
            action = rng.choice(["join", "leave", "kill"]) if len(live) > 1 else "join"
            if action == "join" or len(live) < 2:
                await join()
            else:
                worker = live.pop(rng.randrange(len(live)))
                if action == "leave":
                    await worker.leave()
                else:
                    worker.kill()
                    await worker.reap()
                    kills += 1
                dead.append(worker)
        await wait_until(
            lambda: len(consumed()) >= produced,
            timeout=120,
            what=f"all {produced} messages (seed {seed})",
        )
        for worker in list(live):
            await worker.leave()
    finally:
        for worker in live:
            worker.kill()
    counts = consumed()
    twice = sum(1 for count in counts.values() if count > 1)
    print(
        f"seed {seed}: {rounds} rounds, {len(dead)} members gone ({kills} killed), "
        f"{produced} messages, {twice} delivered more than once"
    )
    assert set(counts) == {f"k{i}" for i in range(produced)}, f"lost messages (seed {seed})"
    if kills == 0:
        assert set(counts.values()) == {1}, f"duplicates without a kill (seed {seed})"


async def test_processing_with_kills_and_freezes_loses_nothing(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
    tmp_path: Path,
) -> None:
    """The processing round: members running process() (handlers in flight at every moment)
    join, leave, die by SIGKILL, or freeze (SIGSTOP) past their session and thaw. Nothing may be
    lost; duplicates are allowed (kills and freezes)."""
    rounds = int(os.environ.get("AIO_CLUSTER_CHAOS_ROUNDS", "12"))
    seed = int(os.environ.get("AIO_CLUSTER_CHAOS_SEED", str(random.randrange(2**32))))
    rng = random.Random(seed)
    topic = await make_topic(6)
    live: list[Worker] = []
    dead: list[Worker] = []
    produced = 0
    faults = Counter[str]()

    def consumed() -> Counter[str]:
        return Counter(key for worker in live + dead for key in worker.consumed_keys())

    async def join() -> None:
        worker = Worker(tmp_path / f"worker{len(live) + len(dead)}.txt")
        await worker.start(cluster, topic, group_name, "process", 3.0)
        live.append(worker)

    try:
        for _ in range(3):
            await join()
        for _ in range(rounds):
            produced += sum((await produce(topic, 300, start=produced)).values())
            action = rng.choice(["join", "leave", "kill", "freeze"]) if len(live) > 1 else "join"
            faults[action] += 1
            if action == "join":
                await join()
            elif action == "freeze":
                worker = rng.choice(live)
                assert worker.process is not None
                worker.process.send_signal(signal.SIGSTOP)
                # The fault itself: frozen past its 3 s session, or within it.
                await asyncio.sleep(rng.uniform(0.5, 5.0))
                worker.process.send_signal(signal.SIGCONT)
            else:
                worker = live.pop(rng.randrange(len(live)))
                if action == "leave":
                    await worker.leave()
                else:
                    worker.kill()
                    await worker.reap()
                dead.append(worker)
        await wait_until(
            lambda: len(consumed()) >= produced,
            timeout=120,
            what=f"all {produced} messages (seed {seed})",
        )
        for worker in list(live):
            await worker.leave()
    finally:
        for worker in live:
            if worker.process is not None and worker.process.returncode is None:
                worker.process.send_signal(signal.SIGCONT)
            worker.kill()
    counts = consumed()
    twice = sum(1 for count in counts.values() if count > 1)
    print(
        f"seed {seed}: {rounds} rounds, faults {dict(faults)}, {produced} messages, "
        f"{twice} handled more than once"
    )
    assert set(counts) == {f"k{i}" for i in range(produced)}, f"lost messages (seed {seed})"
