"""A consumer-group member inside an aiohttp app: it lives in a ``cleanup_ctx``.

Start-up joins the group and starts consuming in a task; ``GET /health`` reports the member,
its claimed partitions, their lag and what it consumed; ``GET /metrics`` serves its figures to
Prometheus (`aio_cluster.metrics`); shutdown (SIGTERM or Ctrl-C) closes the
member, which stores the offsets of every finished batch and releases its partitions to the rest
of the group, and ends the consuming task within ``HANDLER_GRACE`` seconds after that.

    export AIO_CLUSTER_BOOTSTRAP=127.0.0.1:9092 AIO_CLUSTER_ZOOKEEPER=127.0.0.1:2181
    export AIO_CLUSTER_GROUP=my-group AIO_CLUSTER_TOPIC=my-topic
    python examples/aiohttp_app.py --port 8080
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from aio_cluster import Batch, BrokerError, ConsumerGroup, GroupClosedError, GroupState
from aio_cluster.metrics import GroupMetrics

HANDLER_GRACE = 5.0
"""Seconds shutdown lets a batch's handler finish after the member left, before cancelling it.
(Leaving itself is bounded by the member's ``close_timeout``.)"""

log = logging.getLogger("aiohttp_app")
GROUP = web.AppKey("group", ConsumerGroup)
CONSUMED = web.AppKey("consumed", Counter[int])
METRICS = web.AppKey("metrics", GroupMetrics)
REGISTRY = web.AppKey("registry", CollectorRegistry)


async def handle(partition: int, batch: Batch) -> None:
    """The app's own work with a batch; here it only logs it."""
    log.info("partition %d: %d records up to offset %d", partition, len(batch), batch[-1].offset)


async def consume(group: ConsumerGroup, consumed: Counter[int]) -> None:
    """Every batch of the member's partitions until the member closes."""
    async for partition, batch in group:
        await handle(partition, batch)
        consumed[partition] += len(batch)


async def member(app: web.Application) -> AsyncIterator[None]:
    """The cleanup context: join and consume on start-up, leave on shutdown."""
    group = ConsumerGroup(
        os.environ["AIO_CLUSTER_GROUP"],
        os.environ["AIO_CLUSTER_BOOTSTRAP"].split(","),
        os.environ["AIO_CLUSTER_ZOOKEEPER"].split(","),
        os.environ["AIO_CLUSTER_TOPIC"],
    )
    app[GROUP] = group
    app[CONSUMED] = Counter()
    # A registry of the app's own; prometheus_client's global REGISTRY works as well.
    app[REGISTRY] = CollectorRegistry()
    app[METRICS] = GroupMetrics(group, registry=app[REGISTRY])
    async with group:
        task = asyncio.create_task(consume(group, app[CONSUMED]), name="consume")
        try:
            yield
        finally:
            # Closing ends the loop at the next batch boundary, stores the finished batches'
            # offsets and releases the claims; a handler still busy after the grace is
            # cancelled (its batch is not committed, so the partition's next owner gets it).
            await group.close()
            done, _pending = await asyncio.wait([task], timeout=HANDLER_GRACE)
            if not done:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def health(request: web.Request) -> web.Response:
    """The member's id, state, claimed partitions and lag (from its ``statistics()``) and, for
    each partition, the stored offset, the log end, the lag and how many records this process
    consumed; 503 while the member is not joined."""
    group = request.app[GROUP]
    consumed = request.app[CONSUMED]
    report: dict[str, Any] = {"member": group.id, "state": group.state.value}
    if group.state is not GroupState.JOINED:
        return web.json_response(report, status=503)
    try:
        stats = await group.statistics()
    except (GroupClosedError, BrokerError):
        return web.json_response(report, status=503)
    report.update(
        group=group.name,
        topic=group.topic,
        session=stats.session,
        claimed=list(stats.claimed),
        lag=sum(p.lag for p in stats.partitions),
        consumed=sum(consumed.values()),
        rebalances=stats.rebalances,
        partitions={
            str(p.partition): {
                "stored_offset": p.stored,
                "end": p.end,
                "lag": p.lag,
                "consumed": consumed[p.partition],
            }
            for p in stats.partitions
        },
    )
    return web.json_response(report)


async def metrics(request: web.Request) -> web.Response:
    """The member's lag, offsets, counters, rebalance durations and session state in
    Prometheus's text format, as of this request."""
    await request.app[METRICS].refresh()
    return web.Response(
        body=generate_latest(request.app[REGISTRY]), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


def create_app() -> web.Application:
    app = web.Application()
    app.cleanup_ctx.append(member)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="an aiohttp app with a consumer-group member")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    options = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    web.run_app(create_app(), host=options.host, port=options.port)
