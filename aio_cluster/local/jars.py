"""The servers' jars: fetched once with Maven from ``aio_cluster/jars/pom.xml`` into a cache outside
the repository, shared (and file-locked) between processes."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Literal

from ..errors import LocalClusterError
from . import config, process

_log = logging.getLogger(__name__)

CACHE_VAR = "AIO_CLUSTER_CACHE"
MAVEN_TIMEOUT = 600.0  # a cold fetch of the jars takes ~20 s on a good line


def default_cache_dir() -> Path:
    return Path(os.environ.get(CACHE_VAR) or Path.home() / ".cache" / "aio-cluster")


async def resolve_jars(cache_dir: Path, profile: Literal["kafka", "zookeeper", "tools"]) -> Path:
    """The directory of one classpath, fetched with Maven on first use: a server's, or Kafka's
    command-line tools' (``tools``, for the tests that compare with what Kafka's tools see).

    The cache is keyed by a digest of the pom, so that a changed pom gets fresh jars; a marker file
    written last tells a complete copy from an interrupted one; a file lock keeps two processes
    from copying at once.
    """
    pom = config.JARS / "pom.xml"
    target = cache_dir / hashlib.sha256(pom.read_bytes()).hexdigest()[:16] / profile
    marker = target / ".complete"
    if marker.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    async with _file_lock(target.parent / f"{profile}.lock"):
        if marker.exists():  # another process fetched them while we waited
            return target
        mvn = shutil.which("mvn")
        if mvn is None:
            raise LocalClusterError(
                f"Maven (mvn) is needed once, to fetch the {profile} jars into {target}"
            )
        _log.info("fetching the %s jars with Maven into %s (first start only)", profile, target)
        shutil.rmtree(target, ignore_errors=True)
        command = [
            mvn,
            "-B",
            "-q",
            f"-P{profile}",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={target}",
        ]
        maven_log = target.parent / f"{profile}-maven.log"
        maven_log.unlink(missing_ok=True)
        maven = process.Child(f"Maven fetching the {profile} jars", command, maven_log)
        try:
            await maven.run(asyncio.get_running_loop().time() + MAVEN_TIMEOUT)
        finally:
            await maven.stop()
        marker.write_text(f"{time.time()}\n")
    return target


@contextlib.asynccontextmanager
async def _file_lock(path: Path) -> AsyncIterator[None]:
    """An exclusive flock on ``path``, polled so that waiting for it stays cancellable."""
    with path.open("a") as lock:
        deadline = time.monotonic() + MAVEN_TIMEOUT
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LocalClusterError(f"{path} stayed locked by another process") from None
                await asyncio.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
