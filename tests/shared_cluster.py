"""The cluster the workers of a parallel test run share (``pytest -n N``): the controller starts
it before the workers, names it in their environment (``AIO_CLUSTER_BOOTSTRAP`` and
``AIO_CLUSTER_ZOOKEEPER``, which the `cluster` fixture honours) and stops it at the end.
``nox -s tests`` starts one the same way for all its passes, and the controllers then use that.

It runs in a process of its own, this module run as a script: it starts a local single-node
cluster (never one the environment names), prints the two variables, and stops the cluster once
its standard input closes, that is when the controller stops it or dies however it dies. Its
servers die with it (see `aio_cluster.local`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

import pytest

from aio_cluster.local import LocalCluster
from aio_cluster.local.env import BOOTSTRAP_VAR, ZOOKEEPER_VAR
from aio_cluster.local.process import ARCHIVE_STOP_GRACE

STOP_TIMEOUT = 2 * ARCHIVE_STOP_GRACE + 30
"""Seconds the cluster has to stop once asked (its servers get 15 s each before SIGKILL, 90 s
one that writes its class archive)."""


def wanted(config: pytest.Config) -> bool:
    """Whether this pytest process should start a shared cluster: it is the controller of a
    parallel run, it will run tests, and the environment names no cluster."""
    if hasattr(config, "workerinput"):  # a worker: it inherits the controller's environment
        return False
    if not getattr(config.option, "numprocesses", None) or config.option.collectonly:
        return False
    return not (os.environ.get(BOOTSTRAP_VAR) or os.environ.get(ZOOKEEPER_VAR))


@dataclass
class SharedCluster:
    """The running cluster process and the variables that name its cluster."""

    process: subprocess.Popen[bytes]
    variables: dict[str, str] = field(default_factory=dict)

    @classmethod
    def start(cls) -> SharedCluster:
        """Start the cluster process and return once its cluster answers.

        Raises:
            pytest.UsageError: the cluster did not start (the message quotes its output).
        """
        with tempfile.TemporaryFile() as log:  # its progress, quoted if it fails
            process = subprocess.Popen(
                [sys.executable, __file__],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
            )
            started = cls(process)
            assert process.stdout is not None
            for _ in range(2):
                name, _, value = process.stdout.readline().decode().strip().partition("=")
                if name not in (BOOTSTRAP_VAR, ZOOKEEPER_VAR) or not value:
                    started.stop()
                    log.seek(0)
                    output = log.read().decode(errors="replace")
                    raise pytest.UsageError(f"the shared test cluster did not start:\n{output}")
                started.variables[name] = value
        return started

    def stop(self) -> None:
        """Stop the cluster (closing the process's input) and wait for the process to end."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()  # its servers die with it
            self.process.wait()


async def _serve() -> None:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    closed = asyncio.Event()

    def read() -> None:
        if not os.read(sys.stdin.fileno(), 4096):
            loop.remove_reader(sys.stdin.fileno())
            closed.set()

    async with LocalCluster(use_env=False) as cluster:
        print(f"{BOOTSTRAP_VAR}={cluster.bootstrap}")
        print(f"{ZOOKEEPER_VAR}={cluster.zookeeper}", flush=True)
        # From now on only trouble: the output of the tests that use the cluster is theirs.
        logging.getLogger("aio_cluster.local").setLevel(logging.WARNING)
        loop.add_reader(sys.stdin.fileno(), read)
        await closed.wait()


def main() -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("aio_cluster.local").setLevel(logging.INFO)
    with contextlib.suppress(asyncio.CancelledError, KeyboardInterrupt):
        asyncio.run(_serve())  # to its end, or SIGTERM or Ctrl-C: the cluster has stopped


if __name__ == "__main__":
    main()
