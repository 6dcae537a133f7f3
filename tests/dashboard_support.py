"""Helpers of the dashboard's tests: the dashboard served by a real uvicorn on a free port,
members that consume in the background until stopped, and the Chromium the browser tests drive."""

from __future__ import annotations

import contextlib
import shutil
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import uvicorn

from aio_cluster import ConsumerGroup
from aio_cluster.dashboard import Dashboard
from aio_cluster.local import LocalCluster

from support import member

FAST = {"interval": 0.5, "window": 3.0, "timeout": 3.0}
"""A dashboard that looks often and judges on a short window, so that the tests wait little."""


def dashboard_of(cluster: LocalCluster, *groups: str, **options: Any) -> Dashboard:
    """A dashboard of ``groups`` on ``cluster``, with `FAST` timings unless ``options`` say."""
    return Dashboard(cluster.bootstrap, cluster.zookeeper, groups=groups, **{**FAST, **options})


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.asynccontextmanager
async def served(dashboard: Dashboard) -> AsyncIterator[str]:
    """``dashboard`` served by uvicorn on 127.0.0.1 (its lifespan runs it); yields its URL."""
    port = _free_port()
    config = uvicorn.Config(
        dashboard.app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(server.serve)
        with anyio.fail_after(30):
            while not server.started:  # noqa: ASYNC110 - uvicorn sets a flag, no event
                await anyio.sleep(0.05)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True


@contextlib.asynccontextmanager
async def consuming(cluster: LocalCluster, group: str, topic: str) -> AsyncIterator[ConsumerGroup]:
    """A member of ``group`` that reads ``topic`` in the background; it leaves the group
    (gracefully, as a stopped service does) when the block ends."""
    async with member(cluster, group, topic) as joined, anyio.create_task_group() as tasks:

        async def read() -> None:
            async for _partition, _batch in joined:
                pass

        tasks.start_soon(read)
        yield joined
        tasks.cancel_scope.cancel()


def chromium() -> str:
    """The machine's Chromium (Debian's ``chromium`` package); the test is skipped, saying so,
    where there is none. Playwright's own browser download is not used."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    if Path("/usr/bin/chromium").is_file():
        return "/usr/bin/chromium"
    pytest.skip("no Chromium on this machine (apt-get install chromium; .ci/run does)")


def artifacts(name: str) -> Path:
    """Where a test's screenshots go: ``$TMPDIR/aio-cluster-dashboard/<name>/`` (never the
    repository)."""
    import tempfile  # noqa: PLC0415

    folder = Path(tempfile.gettempdir()) / "aio-cluster-dashboard" / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder
