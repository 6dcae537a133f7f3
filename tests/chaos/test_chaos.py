"""Chaos: member processes join, leave gracefully, die by SIGKILL and freeze (SIGSTOP) past their
session at random while messages are produced. Nothing may be lost; duplicates are allowed only
around a kill or a freeze (at least once). Each freeze stops the oldest member, the sticky
leader, until its registration is gone, then lets it go on: it comes back as the youngest, and at
the end the group has one leader (the published target stays still). Half the members are named
(``member_name``, a grace of 5 s); a restart kills one and starts it again at once under its
name, before its session expired, so the newcomer takes the name and the partitions over.

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
from aio_cluster.zookeeper.client import NoNodeError, ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout, decode_target

from conftest import MakeTopic, Produce
from support import Worker, wait_until

pytestmark = [pytest.mark.asyncio, pytest.mark.chaos]


async def test_random_joins_leaves_and_kills_lose_nothing(
    cluster: LocalCluster,
    zk: ZooKeeper,
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
    freezes = 0
    restarts = 0
    layout = GroupLayout(group_name, topic)

    names: dict[Worker, str] = {}
    """The named members (``member_name``, a grace of 5 s), by worker."""

    async def registration(worker: Worker) -> str | None:
        assert worker.process is not None
        ids = await zk.get_children(layout.ids)
        if worker in names:
            return names[worker] if names[worker] in ids else None
        mark = f"-{worker.process.pid}-"
        return next((m for m in ids if mark in m), None)

    async def freeze_the_oldest() -> None:
        """SIGSTOP the oldest live member until its session expired, then SIGCONT."""
        worker = live.pop(0)
        assert worker.process is not None
        worker.process.send_signal(signal.SIGSTOP)
        try:

            async def gone() -> bool:
                return await registration(worker) is None

            await wait_until(gone, timeout=60, what=f"the frozen member's expiry (seed {seed})")
        finally:
            worker.process.send_signal(signal.SIGCONT)
        live.append(worker)  # back as the youngest

    async def one_leader() -> None:
        """The target follows the live members, oldest first, and then stays still."""

        async def followed() -> bool:
            # Oldest first by creation zxid: a member back from a freeze registers again only
            # once it learns its session expired, maybe after a member started later.
            ids = [await registration(worker) for worker in live]
            if None in ids:
                return False
            try:
                made = {m: (await zk.get(layout.member(m)))[1].czxid for m in ids if m is not None}
            except NoNodeError:
                return False  # gone meanwhile: look again
            data, _stat = await zk.get(layout.assignment)
            return list(decode_target(data).members) == sorted(made, key=made.__getitem__)

        await wait_until(followed, timeout=60, what=f"the target to follow (seed {seed})")
        version = (await zk.get(layout.assignment))[1].version
        await asyncio.sleep(5)  # a span of time in which nothing may happen, not a condition
        after = (await zk.get(layout.assignment))[1].version
        assert after == version, f"the target was rewritten {after - version} times (seed {seed})"

    def consumed() -> Counter[str]:
        return Counter(key for worker in live + dead for key in worker.consumed_keys())

    async def join(name: str | None = None) -> None:
        number = len(live) + len(dead)
        worker = Worker(tmp_path / f"worker{number}.txt")
        if name is None and rng.random() < 0.5:
            name = f"named-{number}"
        mode = rng.choice(["auto", "manual"])
        await worker.start(cluster, topic, group_name, mode, 3.0, name=name, grace=5.0)
        if name is not None:
            names[worker] = name
        live.append(worker)

    try:
        for _ in range(3):
            await join()
        for _ in range(rounds):
            produced += sum((await produce(topic, 200, start=produced)).values())
            actions = ["join", "leave", "kill", "freeze", "restart"]
            action = rng.choice(actions) if len(live) > 1 else "join"
            if action == "join" or len(live) < 2:
                await join()
            elif action == "freeze":
                await freeze_the_oldest()
                freezes += 1
            else:
                worker = live.pop(rng.randrange(len(live)))
                if action == "leave":
                    await worker.leave()
                else:
                    worker.kill()
                    await worker.reap()
                    kills += 1
                dead.append(worker)
                if action == "restart" and worker in names:
                    # Back under its name before its session expired: it takes the name over.
                    await join(names[worker])
                    restarts += 1
        await wait_until(
            lambda: len(consumed()) >= produced,
            timeout=120,
            what=f"all {produced} messages (seed {seed})",
        )
        await one_leader()
        for worker in list(live):
            await worker.leave()
    finally:
        for worker in live:
            worker.kill()
    counts = consumed()
    twice = sum(1 for count in counts.values() if count > 1)
    print(
        f"seed {seed}: {rounds} rounds, {len(dead)} members gone ({kills} killed), "
        f"{freezes} oldest members frozen past their session, {restarts} restarted by name, "
        f"{produced} messages, {twice} delivered more than once"
    )
    assert set(counts) == {f"k{i}" for i in range(produced)}, f"lost messages (seed {seed})"
    if kills == 0 and freezes == 0:
        assert set(counts.values()) == {1}, f"duplicates without a kill or freeze (seed {seed})"


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
