"""Child processes: the JVMs of the servers and the tools (Maven, Kafka's storage format), each in
a process group of its own that is ended as a whole and dies with this process."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import logging
import os
import resource
import shutil
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import IO, Any

import anyio

from ..concurrency import background, outlasting
from ..errors import LocalClusterError
from . import config, probes
from .class_archive import ClassArchive

_log = logging.getLogger(__name__)

STOP_GRACE = 15.0  # seconds between SIGTERM and SIGKILL
ARCHIVE_STOP_GRACE = 90.0
"""The same for a JVM that writes its class archive as it exits (`ClassArchive`): 4 s on an idle
2-core machine, over 15 s on a loaded one, where a kill would waste the work."""
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


class Child:
    """A child process: a server (with a probe that tells when it answers) or a tool (Maven, the
    storage format), with its command line and the log file its output goes to."""

    def __init__(
        self,
        name: str,
        command: list[str],
        log: Path,
        probe: Callable[[float], Awaitable[bool]] | None = None,
        archive: ClassArchive | None = None,
    ) -> None:
        self.name = name
        self._command = command
        self._log = log
        self._probe = probe
        self._archive = archive
        self._process: asyncio.subprocess.Process | None = None

    @property
    def running(self) -> bool:
        """Whether the process was started and has not exited."""
        return self._process is not None and self._process.returncode is None

    async def spawn(self) -> None:
        """Start the process, unless it runs already; its output is appended to the log."""
        if self._process is not None and self._process.returncode is None:
            return
        command = self._command
        if self._archive is not None:
            self._archive.ended(cleanly=False)  # an earlier run that ended unseen (killed)
            command = [command[0], *self._archive.flags(), *command[1:]]
        with self._log.open("ab") as log:
            self._process = await _spawn(command, log)

    async def start(self, deadline: float) -> None:
        """Start the process and wait until it answers."""
        await self.spawn()
        await self.wait_ready(deadline)

    async def wait_ready(self, deadline: float) -> None:
        """Poll the probe until it succeeds; fail when the process exits or time runs out."""
        assert self._process is not None
        assert self._probe is not None
        loop = asyncio.get_running_loop()
        while True:
            if self._process.returncode is not None:
                raise self._failure(
                    f"exited with code {self._process.returncode} before it was ready"
                )
            if loop.time() >= deadline:
                raise self._failure("did not answer in time")
            if await self._probe(probes.attempt_timeout(deadline)):
                return
            await asyncio.sleep(probes.POLL_INTERVAL)

    async def run(self, deadline: float) -> None:
        """Start the process and wait for its successful exit (a tool, not a server)."""
        await self.spawn()
        assert self._process is not None
        left = deadline - asyncio.get_running_loop().time()
        try:
            with anyio.fail_after(max(left, 0.1)):
                code = await self._process.wait()
        except TimeoutError:
            raise self._failure("did not finish in time") from None
        if self._archive is not None:
            self._archive.ended(cleanly=code == 0)
        if code != 0:
            raise self._failure(f"failed with exit code {code}")

    async def stop(self) -> None:
        """End the process group: SIGTERM, and SIGKILL if it is still there after a grace time."""
        process = self._process
        if process is None or process.returncode is not None:
            if self._archive is not None:
                self._archive.ended(cleanly=False)  # it ended by itself: a crash, or killed
            return
        _signal_group(process.pid, signal.SIGTERM)
        cleanly = True
        writing = self._archive is not None and self._archive.writing
        grace = ARCHIVE_STOP_GRACE if writing else STOP_GRACE
        try:
            with anyio.fail_after(grace):
                await process.wait()
        except TimeoutError:
            _log.warning("%s ignored SIGTERM for %g s: killing it", self.name, grace)
            _signal_group(process.pid, signal.SIGKILL)
            await process.wait()
            cleanly = False
        if self._archive is not None:
            self._archive.ended(cleanly=cleanly)

    def _failure(self, what: str) -> LocalClusterError:
        return LocalClusterError(f"{self.name} {what}; the end of its log:\n{log_tail(self._log)}")


def open_files_limit() -> int:
    """How many files a child may open: the hard limit, to which `_spawn` raises each child's
    soft limit (Kafka keeps at least one file open per partition, and a default soft limit of
    1,024 or even 20,000 ends it with "Too many open files" long before the disk is full)."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return hard


def partitions_held() -> int:
    """About how many partitions a local broker holds within `open_files_limit()`: it keeps one
    or two files open per partition (with a limit of 20,000 it died of "Too many open files"
    between 15,000 and 17,000 partitions)."""
    return open_files_limit() * 3 // 4


async def _spawn(command: Sequence[str], output: IO[bytes] | int) -> asyncio.subprocess.Process:
    """Start a child in a process group of its own (so that stopping reaches all of it) that the
    kernel kills when this process dies, allowed to open as many files as the hard limit lets
    it."""
    die = _die_with_parent()

    def prepare() -> None:
        if die is not None:
            die()
        _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    return await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=output,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=prepare,
    )


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec function that has Linux SIGKILL the child when its parent dies.

    The kernel sends the signal when the *thread* that forked the child ends, so children must be
    spawned from a thread that lives as long as the process: the event loop's, normally the main
    thread.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = _libc().prctl  # looked up here: the child between fork and exec only calls it
    parent = os.getpid()

    def set_death_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL))
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(1)

    return set_death_signal


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal the process group ``pid`` leads (started with ``start_new_session``)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


async def shielded(cleanup: Coroutine[Any, Any, None]) -> None:
    """Run ``cleanup`` to its end even when the caller is cancelled meanwhile (Ctrl-C must not
    leave servers behind), then let the cancellation go on."""
    await outlasting(background(cleanup, name="local cluster cleanup"))


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        with path.open("rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - 16384))
            text = log.read().decode(errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"


# Sized for a 2-core machine with plenty of memory, where the tests run next to the servers. A
# local cluster lives for a test run or a demo, with little traffic: the C1 compiler alone and
# the serial collector cost less CPU while the JVMs start and warm up (measured on a loaded 2-core
# machine: a single-node cluster ready in 16 s on 7 CPU-seconds instead of 25 s on 12; a
# multi-node one, six JVMs on two cores, in 16-18 s instead of 24-32 s), at a throughput the
# tests and the demo never miss.
QUICK_START = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
KAFKA_HEAP = ("-Xms256m", "-Xmx768m", *QUICK_START)
ZOOKEEPER_HEAP = ("-Xms64m", "-Xmx256m", *QUICK_START)
# A node of a multi-node cluster: six JVMs share two cores, so each gets less memory.
KAFKA_NODE_HEAP = ("-Xms128m", "-Xmx512m", *QUICK_START)
ZOOKEEPER_NODE_HEAP = ("-Xms32m", "-Xmx128m", *QUICK_START)
TOOL_FLAGS = ("-Xmx256m", "-XX:TieredStopAtLevel=1")  # short-lived: C1 alone starts faster
ZOOKEEPER_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


def java_command(
    java: str, jars: Path, heap: Sequence[str], main_class: str, *args: str
) -> list[str]:
    return [
        java,
        *heap,
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.net.preferIPv4Stack=true",
        f"-Dlog4j2.configurationFile={config.JARS / 'log4j2.yaml'}",
        "-cp",
        f"{jars.resolve()}/*",  # as a class archive records it (`ClassArchive`)
        main_class,
        *args,
    ]


def find_java() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(candidate := Path(java_home, "bin", "java"), os.X_OK):
        return str(candidate)
    return shutil.which("java")
