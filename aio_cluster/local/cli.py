"""The ``aio-cluster-local`` command (``python -m aio_cluster.local``): ``up`` and ``down``."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from ..errors import ConfigurationError, LocalClusterError
from . import env, jars, process
from .cluster import LocalCluster


@dataclass(frozen=True, slots=True)
class LocalOptions:
    """``local up|down`` (and the ``aio-cluster-local`` script): the ports are for ``up``,
    None meaning a free one."""

    action: Literal["up", "down"]
    kafka_port: int | None
    zookeeper_port: int | None


def add_local_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``local`` (and of the ``aio-cluster-local`` script); `local_options`
    reads them."""
    parser.add_argument(
        "action",
        choices=["up", "down"],
        help="up: start a cluster, print its export lines, stay up until Ctrl-C, SIGTERM or "
        "down; down: stop the cluster of the running up",
    )
    parser.add_argument("--kafka-port", type=int, help="Kafka's port for up (default: a free one)")
    parser.add_argument(
        "--zookeeper-port", type=int, help="ZooKeeper's port for up (default: a free one)"
    )


def local_options(args: argparse.Namespace) -> LocalOptions:
    """What `add_local_arguments` declared, as typed values."""
    return LocalOptions(
        action=cast(Literal["up", "down"], args.action),
        kafka_port=args.kafka_port,
        zookeeper_port=args.zookeeper_port,
    )


def main(argv: list[str] | None = None) -> int:
    """The ``aio-cluster-local`` command: ``up`` starts a cluster and prints its two ``export``
    lines, ``down`` stops the running ``up``. Its arguments are those of ``aio-cluster local``.

    Args:
        argv: the arguments after the program name; default ``sys.argv[1:]``.

    Returns:
        The exit status: 0 on success, 1 on failure (the reason on stderr).
    """
    parser = argparse.ArgumentParser(
        prog="aio-cluster-local",
        description="A local single-node ZooKeeper + Kafka for aio_cluster development.",
    )
    add_local_arguments(parser)
    return run(local_options(parser.parse_args(argv)))


def run(options: LocalOptions) -> int:
    """``up`` or ``down``, for ``aio-cluster-local`` and ``aio-cluster local`` alike.

    Returns:
        The exit status: 0 on success, 1 on failure (the reason on stderr).
    """
    # Progress to stderr: this package's at INFO, aiokafka's and kazoo's only when they warn.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger(__package__).setLevel(logging.INFO)

    state = jars.default_cache_dir() / "run" / "up.json"
    if options.action == "down":
        return _down(state)
    try:
        return asyncio.run(_up(state, options.kafka_port, options.zookeeper_port))
    except (ConfigurationError, LocalClusterError) as exc:
        print(f"aio-cluster-local: {exc}", file=sys.stderr)
        return 1


async def _up(state: Path, kafka_port: int | None, zookeeper_port: int | None) -> int:
    running = _read_state(state)
    if running is not None and _alive(running["pid"]):
        print(
            f"aio-cluster-local: already up (pid {running['pid']}, Kafka {running['bootstrap']}); "
            "stop it with: python -m aio_cluster.local down",
            file=sys.stderr,
        )
        return 1
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    cluster = LocalCluster(kafka_port=kafka_port, zookeeper_port=zookeeper_port, use_env=False)
    try:
        async with cluster:
            data_dir = cluster._data_dir
            _write_state(
                state,
                {
                    "pid": os.getpid(),
                    "bootstrap": cluster.bootstrap,
                    "zookeeper": cluster.zookeeper,
                    "data_dir": None if data_dir is None else str(data_dir),
                },
            )
            print(f"export {env.BOOTSTRAP_VAR}={cluster.bootstrap}")
            print(f"export {env.ZOOKEEPER_VAR}={cluster.zookeeper}", flush=True)
            if cluster.mode == "java":
                print(
                    f"aio-cluster-local: Kafka may open {process.open_files_limit():,} files: it "
                    f"holds about {process.partitions_held():,} partitions (raise the hard "
                    "limit, ulimit -Hn, for more)",
                    file=sys.stderr,
                )
            await asyncio.Event().wait()  # until a signal cancels this task
    except asyncio.CancelledError:
        pass  # Ctrl-C, SIGTERM or `down`: the cluster has stopped
    finally:
        _forget_state(state)  # last: once the file is gone, `down` knows the cluster stopped
    return 0


def _down(state: Path) -> int:
    running = _read_state(state)
    if running is None or not _alive(running["pid"]):
        if running is not None:  # the `up` was killed: what it left behind goes now
            if running.get("data_dir"):
                shutil.rmtree(running["data_dir"], ignore_errors=True)
            state.unlink(missing_ok=True)
        print("aio-cluster-local: nothing running", file=sys.stderr)
        return 1
    pid = running["pid"]
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 2 * process.ARCHIVE_STOP_GRACE + 30
    while state.exists() and _alive(pid):
        if time.monotonic() > deadline:
            print(f"aio-cluster-local: pid {pid} did not stop in time", file=sys.stderr)
            return 1
        time.sleep(0.1)
    state.unlink(missing_ok=True)
    print(f"aio-cluster-local: stopped Kafka {running['bootstrap']}", file=sys.stderr)
    return 0


def _read_state(path: Path) -> dict[str, Any] | None:
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and isinstance(state.get("pid"), int) else None


def _write_state(path: Path, state: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(state))
    partial.replace(path)


def _forget_state(path: Path) -> None:
    """Remove the state file if this process wrote it."""
    running = _read_state(path)
    if running is not None and running["pid"] == os.getpid():
        path.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # gone, or the pid is someone else's now
        return False
    return True
