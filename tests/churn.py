"""The churn the chaos and soak tests put a group through: a `FaultProxy` to ZooKeeper per member
process (so that one member's ZooKeeper traffic alone can be cut), a cut past a member's session,
and what a settled group of `PARTITIONS` partitions looks like."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence

from aio_cluster.local import FaultProxy, LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from support import Worker, now, owners, wait_until

PARTITIONS = 6
SESSION = 3.0
"""The members' session timeout, in seconds."""


class Proxies:
    """A `FaultProxy` to ZooKeeper for every member process, run by the test process: the member
    is given its address, so that its ZooKeeper traffic alone can be cut off."""

    def __init__(self, cluster: LocalCluster) -> None:
        self._cluster = cluster
        self._proxies: dict[Worker, FaultProxy] = {}

    async def address(self, worker: Worker) -> str:
        """Start ``worker``'s proxy; returns its address."""
        proxy = FaultProxy(self._cluster.zookeeper)
        await proxy.start()
        self._proxies[worker] = proxy
        return proxy.address

    async def cut_off(
        self, worker: Worker, refuse: bool, expired: Callable[[], Awaitable[bool]]
    ) -> float:
        """Drop ``worker``'s ZooKeeper traffic (or, with ``refuse``, close its connections and
        refuse new ones) until ``expired()``, then heal. Returns when the cut began
        (`support.now()`)."""
        proxy = self._proxies[worker]
        began = now()
        if refuse:
            proxy.cut()
        else:
            proxy.drop()
        try:
            await wait_until(expired, timeout=60, what="the cut member's session expired")
        finally:
            proxy.forward()
        return began

    async def stop(self) -> None:
        for proxy in self._proxies.values():
            await proxy.stop()


async def put_down(workers: Iterable[Worker], proxies: Proxies) -> None:
    """A churn's end, whatever the test's outcome: every worker SIGKILLed (one still running
    thawed first, in case it is frozen) and reaped, then every ZooKeeper proxy stopped."""
    for worker in workers:
        if worker.process is not None and worker.process.returncode is None:
            worker.process.send_signal(signal.SIGCONT)
        worker.kill()
        await worker.reap()
    await proxies.stop()


async def registration(
    zk: ZooKeeper, layout: GroupLayout, worker: Worker, name: str | None = None
) -> str | None:
    """The member id ``worker`` is registered under (its ``name``, if named), or None."""
    assert worker.process is not None
    ids = await zk.get_children(layout.ids)
    if name is not None:
        return name if name in ids else None
    mark = f"-{worker.process.pid}-"
    return next((m for m in ids if mark in m), None)


async def settled(zk: ZooKeeper, layout: GroupLayout, members: Sequence[str | None]) -> bool:
    """Every partition is claimed by one of ``members`` (all registered), and their shares
    differ by one at most."""
    registered = [member for member in members if member is not None]
    if len(registered) < len(members):
        return False
    claims = Counter((await owners(zk, layout, range(PARTITIONS))).values())
    shares = [claims[member] for member in registered]
    balanced = max(shares) - min(shares) <= 1
    return set(claims) <= set(registered) and sum(shares) == PARTITIONS and balanced


async def cut_past_session(
    proxies: Proxies,
    zk: ZooKeeper,
    layout: GroupLayout,
    worker: Worker,
    refuse: bool,
    name: str | None = None,
) -> float:
    """Once ``worker`` is registered (a member back from an earlier fault may not be yet), cut it
    off from ZooKeeper until its registration is gone (its session expired), then heal. Returns
    when the cut began (`support.now()`)."""

    async def registered() -> bool:
        return await registration(zk, layout, worker, name) is not None

    async def gone() -> bool:
        return not await registered()

    await wait_until(registered, timeout=60, what="the member to cut registered")
    return await proxies.cut_off(worker, refuse, gone)
