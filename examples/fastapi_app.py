"""A consumer-group member inside a FastAPI app: it lives in the app's lifespan.

Start-up joins the group and starts consuming in a task of the lifespan's task group;
``GET /health`` reports the member, its claimed partitions, their lag and what it
consumed; ``GET /metrics`` serves its figures to Prometheus (`aio_cluster.metrics`); shutdown
(SIGTERM or Ctrl-C to uvicorn) closes the member, which stores the offsets of every finished
batch and releases its partitions to the rest of the group, and ends the consuming task within
``HANDLER_GRACE`` seconds after that.

    export AIO_CLUSTER_BOOTSTRAP=127.0.0.1:9092 AIO_CLUSTER_ZOOKEEPER=127.0.0.1:2181
    export AIO_CLUSTER_GROUP=my-group AIO_CLUSTER_TOPIC=my-topic
    uvicorn fastapi_app:app --app-dir examples
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TypedDict

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from aio_cluster import Batch, BrokerError, ConsumerGroup, GroupClosedError, GroupState
from aio_cluster.metrics import GroupMetrics

HANDLER_GRACE = 5.0
"""Seconds shutdown lets a batch's handler finish after the member left, before cancelling it.
(Leaving itself is bounded by the member's ``close_timeout``.)"""

log = logging.getLogger("fastapi_app")


class State(TypedDict):
    """What the lifespan hands to the requests (``request.state``)."""

    group: ConsumerGroup
    consumed: Counter[int]
    metrics: GroupMetrics
    registry: CollectorRegistry


async def handle(partition: int, batch: Batch) -> None:
    """The app's own work with a batch; here it only logs it."""
    log.info("partition %d: %d records up to offset %d", partition, len(batch), batch[-1].offset)


async def consume(group: ConsumerGroup, consumed: Counter[int]) -> None:
    """Every batch of the member's partitions until the member closes."""
    async for partition, batch in group:
        await handle(partition, batch)
        consumed[partition] += len(batch)


@asynccontextmanager
async def lifespan(_app: FastAPI) -> AsyncIterator[State]:
    group = ConsumerGroup(
        os.environ["AIO_CLUSTER_GROUP"],
        os.environ["AIO_CLUSTER_BOOTSTRAP"].split(","),
        os.environ["AIO_CLUSTER_ZOOKEEPER"].split(","),
        os.environ["AIO_CLUSTER_TOPIC"],
    )
    consumed: Counter[int] = Counter()
    # A registry of the app's own; prometheus_client's global REGISTRY works as well.
    registry = CollectorRegistry()
    metrics = GroupMetrics(group, registry=registry)
    async with group, anyio.create_task_group() as tasks:
        tasks.start_soon(consume, group, consumed)
        yield {"group": group, "consumed": consumed, "metrics": metrics, "registry": registry}
        # Shutdown: closing ends the loop at the next batch boundary, stores the finished
        # batches' offsets and releases the claims; a handler still busy after the grace is
        # cancelled (its batch is not committed, so the partition's next owner gets it again).
        await group.close()
        tasks.cancel_scope.deadline = anyio.current_time() + HANDLER_GRACE


app = FastAPI(title="aio_cluster member", lifespan=lifespan)


@app.get("/health")
async def health(request: Request) -> JSONResponse:
    """The member's id, state, claimed partitions and lag (from its ``statistics()``) and, for
    each partition, the stored offset, the log end, the lag and how many records this process
    consumed; 503 while the member is not joined."""
    group: ConsumerGroup = request.state.group
    consumed: Counter[int] = request.state.consumed
    report: dict[str, Any] = {"member": group.id, "state": group.state.value}
    if group.state is not GroupState.JOINED:
        return JSONResponse(report, status_code=503)
    try:
        stats = await group.statistics()
    except (GroupClosedError, BrokerError):
        return JSONResponse(report, status_code=503)
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
    return JSONResponse(report)


@app.get("/metrics")
async def metrics(request: Request) -> Response:
    """The member's lag, offsets, counters, rebalance durations and session state in
    Prometheus's text format, as of this request."""
    collector: GroupMetrics = request.state.metrics
    await collector.refresh()
    return Response(generate_latest(request.state.registry), media_type=CONTENT_TYPE_LATEST)
