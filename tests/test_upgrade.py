"""A group of the previous release's members upgraded one member at a time, against the real
servers: members of both protocols settle at every step and lose nothing; once all are new, the
share nodes say what the target does; a member of the previous release joining the new group
settles too.

The previous release is the commit before the share protocol, exported from this repository's
history (the test is skipped where the history does not hold it, as in a shallow clone).
"""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest

from aio_cluster.assign.shares import shares_of
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import NoNodeError, ZooKeeper
from aio_cluster.zookeeper.layout import (
    GroupLayout,
    decode_registration,
    decode_share,
    decode_target,
)

from conftest import MakeTopic, Produce
from support import Worker, owners, wait_until

pytestmark = pytest.mark.asyncio

PREVIOUS = "1beeb95efb96f1a5c6006f6c13d389e8dad2e20f"
"""The last commit before the share protocol (every member watched the registrations)."""
PARTITIONS = 6


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the previous release's ``aio_cluster`` package."""
    where = tmp_path_factory.mktemp("previous")
    archive = where / "release.tar"
    root = Path(__file__).parent.parent
    try:
        subprocess.run(
            ["git", "archive", "--output", str(archive), PREVIOUS, "aio_cluster"],
            cwd=root,
            check=True,
            capture_output=True,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"the previous release is not in this checkout's history: {exc}")
    with tarfile.open(archive) as tar:
        tar.extractall(where, filter="data")
    return where


async def settled(zk: ZooKeeper, layout: GroupLayout, *, shares: bool) -> bool:
    """The target counts exactly the registered members, oldest first, and every claim node
    names the member it gives the partition; ``shares``: the share nodes say what it does."""
    try:
        target = decode_target((await zk.get(layout.assignment))[0])
    except NoNodeError:
        return False
    ids = await zk.get_children(layout.ids)
    created = {m: (await zk.get(layout.member(m)))[1].czxid for m in ids}
    if list(target.members) != sorted(ids, key=created.__getitem__):
        return False
    if await owners(zk, layout, range(PARTITIONS)) != target.owners:
        return False
    if not shares:
        return True
    found = {}
    for name in await zk.get_children(layout.shares):
        found[name] = decode_share((await zk.get(layout.share(name)))[0])[1]
    return found == shares_of(target)


async def protocols(zk: ZooKeeper, layout: GroupLayout) -> list[int]:
    """The protocol of each registration, sorted."""
    found = [
        decode_registration((await zk.get(layout.member(m)))[0]).protocol
        for m in await zk.get_children(layout.ids)
    ]
    return sorted(found)


async def test_a_group_upgraded_one_member_at_a_time_settles_and_loses_nothing(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
    tmp_path: Path,
    previous_release: Path,
) -> None:
    topic = await make_topic(PARTITIONS)
    layout = GroupLayout(group_name, topic)
    old = [Worker(tmp_path / f"old{i}.txt") for i in range(3)]
    new = [Worker(tmp_path / f"new{i}.txt") for i in range(3)]
    late = Worker(tmp_path / "late.txt")
    everyone = [*old, *new, late]

    def consumed() -> set[str]:
        return {key for worker in everyone for key in worker.consumed_keys()}

    try:
        for worker in old:
            await worker.start(cluster, topic, group_name, "auto", release=previous_release)
        await produce(topic, 100)
        await wait_until(lambda: settled(zk, layout, shares=False), what="the old group settles")
        assert await protocols(zk, layout) == [1, 1, 1], "the old members are not of protocol 1"
        for step, (leaving, joining) in enumerate(zip(old, new, strict=True)):
            await joining.start(cluster, topic, group_name, "auto")
            if step == 0:
                assert await protocols(zk, layout) == [1, 1, 1, 2]
            await leaving.leave()
            await produce(topic, 100, start=100 * (step + 1))
            await wait_until(
                lambda: settled(zk, layout, shares=False),
                timeout=60,
                what=f"the group settles after upgrading member {step + 1}",
            )
        await wait_until(
            lambda: settled(zk, layout, shares=True), what="the shares follow the target"
        )
        # A member of the previous release joins the new group (a rollback begun): it reads
        # the whole target, which the new leader still writes.
        await late.start(cluster, topic, group_name, "auto", release=previous_release)
        await produce(topic, 100, start=400)
        await wait_until(
            lambda: settled(zk, layout, shares=True), timeout=60, what="the old member settles"
        )
        target = decode_target((await zk.get(layout.assignment))[0])
        assert len(target.members) == 4
        await wait_until(
            lambda: consumed() >= {f"k{i}" for i in range(500)},
            timeout=90,
            what="all 500 consumed",
        )
        for worker in [*new, late]:
            await worker.leave()
    finally:
        for worker in everyone:
            worker.kill()
        for worker in everyone:
            await worker.reap()
    assert consumed() == {f"k{i}" for i in range(500)}, "a message was lost"
