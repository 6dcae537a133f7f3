"""The dashboard at scale: a group of 10,000 partitions over 100 members.

The group's nodes are written straight into ZooKeeper (100 member registrations, an owner and an
offset node per partition of a topic of 10,000 partitions), then the dashboard's work is timed:

- **refresh**: one look at the group (what ``aio-cluster describe`` reads), recorded;
- **page**: the group's page rendered and sent (GET over the app, in process);
- **update**: one event-stream update (the fragments of a page, as JSON);
- the size of both.

The table goes to ``results/dashboard.md`` (shown in docs/dashboard.md).

    python benchmarks/dashboard.py [--partitions 10000] [--members 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import httpx
from common import RESULTS, create_topic, fresh, markdown_table

from aio_cluster.dashboard import Dashboard
from aio_cluster.dashboard.pages import group_fragments
from aio_cluster.dashboard.views import Filters
from aio_cluster.local import LocalCluster
from aio_cluster.operator.plans import LagRow
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout, ids_path
from aio_cluster.zookeeper.values import Create


async def write_group(zk: ZooKeeper, group: str, topic: str, partitions: int, members: int) -> None:
    """Registrations, owners and offsets, in transactions of 1,000 nodes."""
    layout = GroupLayout(group, topic)
    for path in (ids_path(group), layout.owners, layout.offsets):
        await zk.ensure_path(path)
    now = int(time.time() * 1000)
    ids = [f"{group}-bench-{n}-{now}-{n}" for n in range(members)]
    registration = json.dumps(
        {"version": 1, "subscription": {topic: 1}, "pattern": "static", "timestamp": str(now)}
    )
    ops = [Create(f"{ids_path(group)}/{m}", registration.encode()) for m in ids]
    for p in range(partitions):
        ops.append(Create(layout.owner(p), ids[p % members].encode()))
        ops.append(Create(layout.offset(p), b"0"))
    for start in range(0, len(ops), 1000):
        await zk.transaction(ops[start : start + 1000])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--members", type=int, default=100)
    args = parser.parse_args()
    async with LocalCluster() as cluster:
        topic = await create_topic(cluster.bootstrap, args.partitions)
        group = fresh("dashboard")
        zk = ZooKeeper(cluster.zookeeper)
        await zk.start()
        try:
            await write_group(zk, group, topic, args.partitions, args.members)
            dashboard = Dashboard(
                cluster.bootstrap, cluster.zookeeper, groups=[group], timeout=120.0
            )
            async with dashboard:
                refreshes = []
                for _ in range(3):
                    started = time.perf_counter()
                    await dashboard.watcher.refresh()
                    refreshes.append(time.perf_counter() - started)
                history = dashboard.watcher.histories[group]
                rows: list[LagRow] = history.rows
                if len(rows) != args.partitions:
                    servers = (dashboard.watcher.zookeeper, dashboard.watcher.kafka)
                    raise SystemExit(f"no complete look: {[(s.name, s.reason) for s in servers]}")
                transport = httpx.ASGITransport(app=dashboard.app)
                async with httpx.AsyncClient(transport=transport, base_url="http://d") as client:
                    started = time.perf_counter()
                    response = await client.get(f"/groups/{group}")
                    page = time.perf_counter() - started
                started = time.perf_counter()
                update = json.dumps(group_fragments(history, Filters(), "5m", time.time(), ""))
                render = time.perf_counter() - started
        finally:
            await zk.close()
    result = markdown_table(
        [
            "partitions",
            "members",
            "refresh (s)",
            "page (s)",
            "page (KB)",
            "update (s)",
            "update (KB)",
        ],
        [
            [
                f"{args.partitions:,}",
                args.members,
                f"{min(refreshes):.2f}",
                f"{page:.3f}",
                f"{len(response.content) / 1024:.0f}",
                f"{render:.3f}",
                f"{len(update) / 1024:.0f}",
            ]
        ],
    )
    print(result)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "dashboard.md").write_text(result + "\n")


if __name__ == "__main__":
    asyncio.run(main())
