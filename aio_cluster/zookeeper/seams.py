"""Every place the ZooKeeper adapter relies on more of kazoo than its documented interface.

Each use is checked against the installed kazoo when it is taken up (a `ZooKeeper` or a
`LoopHandler` is made). A use that does not fit is switched off, with one warning per process
naming kazoo's version, and kazoo's public path serves instead: the adapter may get slower or less
informed, never stuck or broken, because a private name of kazoo moved.

The uses, what each is for, and what replaces it when it does not fit:

- ``KazooClient._connection._connect(host, hostip, port)``, the handshake of each connection,
  which returns the read timeout kazoo derives from the session timeout the server granted (two
  thirds of it, in milliseconds). `note_handshakes()` wraps it to learn that granted timeout and
  that the server heard from the session then; kazoo keeps neither. Replaced by: the asked-for
  session timeout (too long only where the server's ``maxSessionTimeout`` is below it), and no
  news from handshakes (the requests answered still tell when the server heard the session).
- ``AsyncResult._do_callbacks()`` and its list ``_callbacks``: `direct_result()` makes results
  that run their callbacks on the thread that sets them (kazoo's connection thread) instead of
  passing each through kazoo's completion thread (`threads.py` says why that pays). Replaced by:
  kazoo's own results, their callbacks run by its completion thread.
- ``Callback(type, func, args)``, the watch event a handler's ``dispatch_callback`` receives (a
  public class, but its fields are the handler's contract, not the client's): `LoopHandler` runs
  ``func(*args)`` at once. Replaced by: kazoo's own dispatch, through its callback thread.
"""

from __future__ import annotations

import inspect
import logging
import queue
import time
from collections.abc import Callable
from importlib import metadata
from typing import Any

from kazoo.client import KazooClient
from kazoo.handlers.threading import AsyncResult
from kazoo.protocol import states

__all__ = [
    "direct_result",
    "direct_results_fit",
    "direct_watches_fit",
    "note_handshakes",
    "run_callback",
]

log = logging.getLogger(__name__)

_warned: set[str] = set()
"""The uses already reported as not fitting: one warning each per process."""

_HANDSHAKE_PARAMETERS = ["host", "hostip", "port"]


def kazoo_version() -> str:
    """The installed kazoo's version."""
    return metadata.version("kazoo")


def _does_not_fit(use: str, why: str, instead: str) -> None:
    if use in _warned:
        return
    _warned.add(use)
    log.warning("kazoo %s: %s does not fit (%s); %s instead", kazoo_version(), use, why, instead)


def run_callback(function: Callable[..., object], *args: object) -> None:
    """Run a kazoo callback; one that fails is logged and ends nothing, as with kazoo's threads."""
    try:
        function(*args)
    except Exception:
        log.exception("a ZooKeeper callback failed")


def note_handshakes(client: KazooClient, noted: Callable[[float, float], None]) -> bool:
    """Have ``noted(sent, granted)`` called after each handshake of ``client``: ``sent`` is when
    (``time.monotonic()``) the handshake began, ``granted`` the session timeout in seconds the
    server granted.

    Returns:
        Whether the handshakes are noted: False where kazoo's handshake does not fit (warned).
    """
    use = "KazooClient._connection._connect"
    instead = "the asked-for session timeout serves"
    handshake = getattr(getattr(client, "_connection", None), "_connect", None)
    if not callable(handshake):
        _does_not_fit(use, "no such method", instead)
        return False
    try:
        parameters = list(inspect.signature(handshake).parameters)
    except (TypeError, ValueError):
        parameters = []
    if parameters != _HANDSHAKE_PARAMETERS:
        _does_not_fit(use, f"parameters {parameters}, not {_HANDSHAKE_PARAMETERS}", instead)
        return False

    def noting(host: Any, hostip: Any, port: Any) -> Any:
        sent = time.monotonic()
        answer = handshake(host, hostip, port)
        try:
            read_timeout = float(answer[0])
        except (TypeError, ValueError, IndexError, KeyError):
            _does_not_fit(use, f"it answered {answer!r}", instead)
            return answer
        noted(sent, read_timeout * 1.5 / 1000.0)
        return answer

    client._connection._connect = noting
    return True


class _DirectResult(AsyncResult):  # type: ignore[misc]  # kazoo is untyped
    """kazoo's asynchronous result, its callbacks run by the thread that sets it."""

    def _do_callbacks(self) -> None:
        for callback in self._callbacks:
            run_callback(callback, self)


class _Running:
    """What kazoo's result asks of a running handler: where its callbacks would be queued."""

    running = True

    def __init__(self) -> None:
        self.completion_queue: queue.Queue[object] = queue.Queue()


def direct_results_fit() -> bool:
    """Whether a `direct_result()` runs its callbacks at once in this kazoo (warned if not): a
    result of a running handler, set here, must call back here and queue nothing."""
    handler = _Running()
    heard: list[object] = []
    try:
        result = _DirectResult(handler)
        result.rawlink(heard.append)
        result.set("probe")
        fits = heard == [result] and handler.completion_queue.empty()
        why = "its callbacks were not run at once by the setting thread"
    except Exception as exc:
        fits, why = False, f"{type(exc).__name__}: {exc}"
    if not fits:
        _does_not_fit(
            "AsyncResult._do_callbacks", why, "kazoo's completion thread runs result callbacks"
        )
    return fits


def direct_result(handler: Any) -> AsyncResult:
    """A result of ``handler`` whose callbacks run on the thread that sets it (check
    `direct_results_fit()` first)."""
    return _DirectResult(handler)


def direct_watches_fit() -> bool:
    """Whether kazoo's watch events carry ``func`` and ``args`` (warned if not)."""
    fields = getattr(states.Callback, "_fields", ())
    fits = "func" in fields and "args" in fields
    if not fits:
        _does_not_fit(
            "Callback.func and Callback.args",
            f"its fields are {fields}",
            "kazoo's callback thread runs watch callbacks",
        )
    return fits
