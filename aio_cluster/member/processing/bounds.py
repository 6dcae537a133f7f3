"""Bounds: one attempt of a handler of ``process()`` (a call of ``process_bulk()``'s handler)
cut at ``attempt_timeout``.

`bounded()` wraps the user's handler, so the engine's every way of running it (stepped by hand
in place, awaited in turn, retried, traced) runs the bound with it, and the hot path pays nothing
when no bound is set. An attempt still running at the bound is cancelled through an anyio cancel
scope and fails with [AttemptTimeoutError][aio_cluster.AttemptTimeoutError]: a failure like any
other, retried with the back-off, then given to ``on_failure``. A handler that swallows its
cancellation and returns finished its record (what it did is done); one that keeps running
(a shielded section, a loop that catches the cancellation) holds its key and its partition's
stored offset until it ends: the member logs it once, names it stuck, and a handover or the close
cancels it again (see `aio_cluster.member.stuck`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from ...errors import AttemptTimeoutError

__all__ = ["bounded"]

A = TypeVar("A")
"""What the handler takes: a record, or a bulk call's list of records."""


def bounded(
    handler: Callable[[A], Awaitable[object]], timeout: float
) -> Callable[[A], Awaitable[object]]:
    """``handler`` with each of its calls cut at ``timeout`` seconds (see the module).

    Args:
        handler: ``async def handler(record)`` (or ``(records)``).
        timeout: ``attempt_timeout``, in seconds.
    """

    async def attempt(argument: A) -> object:
        with anyio.move_on_after(timeout):
            return await handler(argument)
        # Here only when the bound's scope caught its cancellation: a return left above.
        raise AttemptTimeoutError(
            f"the handler ran past attempt_timeout ({timeout:g}s) and was cancelled", timeout
        )

    return attempt
