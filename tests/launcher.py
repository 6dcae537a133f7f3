"""``python -m aio_cluster`` for the tests, without paying the interpreter's start and the
package's imports on each run: about 0.9 CPU-seconds a run, some 200 runs in the suite.

A launcher process (this file run as a script) imports the command once and forks for each run:
a watcher child, which forks the command's process, tells its pid, waits for it and tells its
exit status. The command's process gets the run's arguments, environment, working directory and
standard streams (passed as file descriptors), and runs the same ``main()`` as the console
script; the test reads its pipes, signals its pid and reads its status as of any process's
(`Launched`). One launcher serves a test process (`launch`), started on its first run; it ends
when that process does (its standard input closes).
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
            self.returncode = int(line)
            self._closing.close()
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


def _serve(address: str) -> None:
    """Import the command, then fork a watcher for each request until standard input closes."""
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
            return  # the test process ended
        connection, _ = listener.accept()
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            listener.close()
            _watch(connection, command.main)
        connection.close()


def _watch(connection: socket.socket, main: Main) -> None:
    """In a watcher: fork the run, tell its pid, wait for it, tell its status, end."""
    message, ancillary, _, _ = connection.recvmsg(
        REQUEST_LIMIT, socket.CMSG_LEN(3 * array.array("i").itemsize)
    )
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    request = json.loads(message)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    pid = os.fork()
    if pid == 0:
        connection.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        _run(request, main)
    for fd in fds:
        os.close(fd)
    connection.sendall(f"{pid}\n".encode())
    _, status = os.waitpid(pid, 0)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    with contextlib.suppress(OSError):
        connection.sendall(f"{code}\n".encode())
    os._exit(0)


def _run(request: dict[str, object], main: Main) -> None:
    """In the run's process: become ``python -m aio_cluster ARGS`` in its environment, and end
    with its exit status as the interpreter would."""
    args = request["args"]
    env = request["env"]
    cwd = request["cwd"]
    assert isinstance(args, list)
    assert isinstance(env, dict)
    assert isinstance(cwd, str)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = [sys.argv[0], *args]
    code = 1
    try:
        code = main(args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except KeyboardInterrupt:
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)  # as the interpreter ends on one not handled
    except BaseException:  # reported as the interpreter would
        import traceback  # noqa: PLC0415

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        with contextlib.suppress(Exception):
            sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _serve(sys.argv[1])
