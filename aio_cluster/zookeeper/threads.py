"""kazoo's threads, made cheap for many small calls.

kazoo's own threading handler costs a request more CPU than the request itself:
- its connection thread makes and closes an epoll selector for every wait, about five a request
  (the loop's wait, the write, the answer's header, its body);
- every answer and every watch event crosses one thread more (kazoo's completion or callback
  worker) before it reaches the callback `ZooKeeper` gave, which only hands it to the event loop.

A rebalance makes a few calls a partition moved, and a process may host many members, each with
a client and threads of its own: measured with ten clients in one process, a call cost 410 to 590
µs of CPU with kazoo's handler and 125 to 160 µs with this one (docs/benchmarks.md).

`LoopHandler` is kazoo's handler with both changed: it waits by ``poll`` (no limit on descriptor
numbers, no kernel object made and closed), and result and watch callbacks run at once on the
thread that has them, kazoo's connection thread. That is safe because no such callback blocks:
`ZooKeeper`'s (its calls' and its watches') only schedule a call on the event loop, and kazoo's
own (``ensure_path_async``'s, ``sync_async``'s) only read the result they were given and start
other asynchronous calls; kazoo's recipes, whose callbacks may block, are not used. Where
``poll`` does not exist (Windows), waits stay kazoo's; where kazoo's results or watch events are
not shaped as `seams` expects, its own threads run their callbacks.
"""

from __future__ import annotations

import select
from collections.abc import Sequence
from typing import Any

from kazoo.handlers.threading import AsyncResult, SequentialThreadingHandler

from .seams import direct_result, direct_results_fit, direct_watches_fit, run_callback

__all__ = ["LoopHandler"]

_POLL = getattr(select, "poll", None)
_READABLE = getattr(select, "POLLIN", 0) | getattr(select, "POLLPRI", 0)
_WRITABLE = getattr(select, "POLLOUT", 0)
_FAILED = (
    getattr(select, "POLLHUP", 0) | getattr(select, "POLLERR", 0) | getattr(select, "POLLNVAL", 0)
)
"""What makes a descriptor ready either way, as ``select`` has it: the next read or write then
tells the error."""


class LoopHandler(SequentialThreadingHandler):  # type: ignore[misc]  # kazoo is untyped
    """kazoo's threading handler, its result and watch callbacks run on the connection thread
    and its waits done by ``poll``.

    Running callbacks at once relies on kazoo's internals (`seams`): checked when the handler is
    made, and where they do not fit, kazoo's own threads run those callbacks as they would.
    """

    def __init__(self) -> None:
        super().__init__()
        self._direct_results = direct_results_fit()
        self._direct_watches = direct_watches_fit()

    def async_result(self) -> AsyncResult:
        if self._direct_results:
            return direct_result(self)
        return super().async_result()

    def dispatch_callback(self, callback: Any) -> None:
        """Run a watch's callback (kazoo's ``Callback``: ``func`` and ``args``) at once."""
        if self._direct_watches:
            run_callback(callback.func, *callback.args)
        else:
            super().dispatch_callback(callback)

    def select(
        self,
        rlist: Sequence[Any],
        wlist: Sequence[Any],
        xlist: Sequence[Any],
        timeout: float | None = None,
    ) -> tuple[list[Any], list[Any], list[Any]]:
        if _POLL is None or xlist:
            return super().select(rlist, wlist, xlist, timeout)  # type: ignore[no-any-return]
        return poll_select(rlist, wlist, timeout)


def poll_select(
    rlist: Sequence[Any], wlist: Sequence[Any], timeout: float | None
) -> tuple[list[Any], list[Any], list[Any]]:
    """``select.select(rlist, wlist, [], timeout)`` done by one ``poll``: the objects of each list
    that are ready (a descriptor that failed or hung up is ready both ways, as with ``select``).

    Args:
        rlist: objects with ``fileno()`` (or descriptors) waited on for reading.
        wlist: the same, for writing.
        timeout: seconds at most (None: no bound).
    """
    assert _POLL is not None
    readers = [(obj, _fileno(obj)) for obj in rlist]
    writers = [(obj, _fileno(obj)) for obj in wlist]
    wanted: dict[int, int] = {}
    for pairs, mask in ((readers, _READABLE), (writers, _WRITABLE)):
        for _obj, fd in pairs:
            wanted[fd] = wanted.get(fd, 0) | mask
    poller = _POLL()
    for fd, mask in wanted.items():
        poller.register(fd, mask)
    ready = dict(poller.poll(None if timeout is None else max(timeout, 0.0) * 1000))
    return (
        [obj for obj, fd in readers if ready.get(fd, 0) & (_READABLE | _FAILED)],
        [obj for obj, fd in writers if ready.get(fd, 0) & (_WRITABLE | _FAILED)],
        [],
    )


def _fileno(obj: Any) -> int:
    return obj if isinstance(obj, int) else int(obj.fileno())
