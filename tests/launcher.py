"""``python -m aio_cluster`` for the tests, without paying the interpreter's start and the
package's imports on each run: about 0.9 CPU-seconds a run, some 200 runs in the suite.

A launcher process (this file run as a script) imports the command once and forks for each run:
a watcher child, which forks the command's process, tells its pid, waits for it and tells its
exit status. The command's process gets the run's arguments, environment, working directory and
standard streams (passed as file descriptors), and runs the same ``main()`` as the console
script, ending as the interpreter ends a program; the test reads its pipes, signals its pid and
reads its status as of any process's (`Launched`). One launcher serves a test process
(`launcher`), started on its first run; it ends when that process does (its standard input
closes), and the runs still going end with their tests (`test_cli.start` kills them).

What a run cannot take from its environment: what the interpreter reads as it starts
(``PYTHON*`` variables, the hash seed, the locale of the standard streams) is the launcher's,
and ``__main__`` is this file. ``test_the_module_runs_as_a_program`` compares runs with the
interpreter's own.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

Main = Callable[[list[str]], int]
"""The command's entry point, `aio_cluster.__main__.main`."""

REQUEST_LIMIT = 1 << 20
"""The longest request (arguments and environment, as JSON) a launcher reads."""


class Launched:
    """A run of the command, seen as `asyncio.subprocess.Process` shows a process: its pid,
    ``stdout`` and ``stderr`` (readers of its pipes), ``returncode`` once ended."""

    def __init__(
        self,
        pid: int,
        status: asyncio.StreamReader,
        stdout: asyncio.StreamReader,
        stderr: asyncio.StreamReader,
        closing: asyncio.StreamWriter,
    ) -> None:
        self.pid = pid
        self.stdout: asyncio.StreamReader | None = stdout
        self.stderr: asyncio.StreamReader | None = stderr
        self.returncode: int | None = None
        self._status = status
        self._closing = closing

    async def wait(self) -> int:
        """Its exit status once it ended: negative for a signal's number, as asyncio's."""
        if self.returncode is None:
            line = await self._status.readline()
            if not line:
                raise RuntimeError(f"the launcher's watcher of pid {self.pid} ended unseen")
            self.returncode = int(line)
            self._closing.close()  # the watcher reaps the process now
        return self.returncode

    async def communicate(self) -> tuple[bytes, bytes]:
        """Everything it wrote to each stream, once it ended."""
        assert self.stdout is not None
        assert self.stderr is not None
        out, err = await asyncio.gather(self.stdout.read(), self.stderr.read())
        await self.wait()
        return out, err

    def send_signal(self, number: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, number)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Launcher:
    """The client side of a launcher process: `run` starts one run of the command."""

    def __init__(self) -> None:
        self._directory = tempfile.mkdtemp(prefix="aio-cluster-launcher-")
        self.address = os.path.join(self._directory, "socket")
        self._process = subprocess.Popen(
            [sys.executable, __file__, self.address],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self._process.stdout is not None
        if self._process.stdout.readline() != b"ready\n":
            raise RuntimeError(f"the launcher did not start (status {self._process.wait()})")

    async def run(
        self, args: list[str], env: Mapping[str, str], cwd: Path | None = None
    ) -> Launched:
        """The command with ``args`` (after the program's name), run with exactly ``env``."""
        loop = asyncio.get_running_loop()
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        request = json.dumps({"args": args, "env": dict(env), "cwd": str(cwd or os.getcwd())})
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(self.address)
            fds = array.array("i", [0, out_write, err_write])
            connection.sendmsg(
                [request.encode() + b"\n"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)]
            )
        except BaseException:
            connection.close()
            raise
        finally:
            os.close(out_write)
            os.close(err_write)
        connection.setblocking(False)
        status, closing = await asyncio.open_unix_connection(sock=connection)
        stdout = await _reader(loop, out_read)
        stderr = await _reader(loop, err_read)
        pid = int(await status.readline())
        return Launched(pid, status, stdout, stderr, closing)

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()  # the launcher ends on end of file
        self._process.wait()
        with contextlib.suppress(OSError):
            os.unlink(self.address)
            os.rmdir(self._directory)


async def _reader(loop: asyncio.AbstractEventLoop, fd: int) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=2**24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb"))
    return reader


_launcher: Launcher | None = None
_lock = threading.Lock()


def launcher() -> Launcher:
    """This test process's launcher, started on first use."""
    global _launcher  # noqa: PLW0603 - one per process, as the interpreter it stands for
    with _lock:
        if _launcher is None:
            _launcher = Launcher()
            import atexit  # noqa: PLC0415

            atexit.register(_launcher.close)
        return _launcher


# --- the launcher process ----------------------------------------------------------------------


def _serve(address: str) -> tuple[dict[str, Any], Main] | None:
    """Import the command, then fork a watcher for each request until standard input closes.
    Returns in a run's process only: its request, and the command's entry point."""
    from aio_cluster import __main__ as command  # noqa: PLC0415 - what the forks share

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the watchers reap themselves
    sys.stdout.buffer.write(b"ready\n")
    sys.stdout.flush()
    while True:
        readable, _, _ = select.select([listener, sys.stdin], [], [])
        if sys.stdin in readable:
            return None  # the test process ended
        connection, _ = listener.accept()
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            listener.close()
            return _watch(connection), command.main
        connection.close()


def _watch(connection: socket.socket) -> dict[str, Any]:
    """In a watcher: fork the run, tell its pid, wait for it to end, tell its status, and reap
    it once the test closed the connection (until then its pid is not reused: the test may
    still signal it). Returns in the run's process only, with its request."""
    message, ancillary, _, _ = connection.recvmsg(
        REQUEST_LIMIT, socket.CMSG_LEN(3 * array.array("i").itemsize)
    )
    while not message.endswith(b"\n"):
        more = connection.recv(REQUEST_LIMIT)
        if not more:
            os._exit(1)  # the test went away mid-request
        message += more
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    request: dict[str, Any] = json.loads(message)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    pid = os.fork()
    if pid == 0:
        connection.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        return request
    for fd in fds:
        os.close(fd)
    connection.sendall(f"{pid}\n".encode())
    ended = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    assert ended is not None
    exited = ended.si_code == os.CLD_EXITED
    code = ended.si_status if exited else -ended.si_status
    with contextlib.suppress(OSError):
        connection.sendall(f"{code}\n".encode())
        connection.recv(1)  # end of file: the test has the status
    os.waitpid(pid, 0)
    os._exit(0)


def _become(request: dict[str, Any]) -> list[str]:
    """In the run's process: take the run's directory, environment and arguments as
    ``python -m aio_cluster ARGS`` started there would have them; returns the arguments."""
    args = [str(arg) for arg in request["args"]]
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [sys.argv[0], *args]
    sys.path[0] = os.getcwd()  # where -m puts the working directory
    return args


if __name__ == "__main__":
    run = _serve(sys.argv[1])
    if run is not None:
        # The run's process ends as the interpreter ends a program: what main() raises is
        # reported at the top, atexit handlers and finalizers run, the streams are flushed.
        request, main = run
        sys.exit(main(_become(request)))
