"""Bounds: one attempt of a handler of ``process()`` (a call of ``process_bulk()``'s handler)
cut at ``attempt_timeout``.

`bounded()` wraps the user's handler, so the engine's every way of running it (stepped by hand
in place, awaited in turn, retried, traced) runs the bound with it, and the hot path pays nothing
when no bound is set. An attempt still running at the bound is cancelled through an anyio cancel
scope and fails with [AttemptTimeoutError][aio_cluster.AttemptTimeoutError]: a failure like any
other, retried with the back-off, then given to ``on_failure``. A handler that swallows its
cancellation and returns finished its record (what it did is done). One that keeps running (a
shielded section, a loop that catches the cancellation, a thread) holds its key and its
partition's stored offset until it ends: a warning names it `GRACE` seconds past the bound, and
the member counts it as stuck (`aio_cluster.member.stuck`); a handover or the close cancels it
again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from ...errors import AttemptTimeoutError

__all__ = ["GRACE", "bounded"]

log = logging.getLogger(__name__)

GRACE = 1.0
"""Seconds past ``attempt_timeout`` after which an attempt still running is named as one that
ignores its cancellation."""

A = TypeVar("A")
"""What the handler takes: a record, or a bulk call's list of records."""


def bounded(
    handler: Callable[[A], Awaitable[object]],
    timeout: float,
    *,
    member_id: str,
    named: Callable[[A], str],
) -> Callable[[A], Awaitable[object]]:
    """``handler`` with each of its calls cut at ``timeout`` seconds (see the module).

    Args:
        handler: ``async def handler(record)`` (or ``(records)``).
        timeout: ``attempt_timeout``, in seconds.
        member_id: named in the warning of an attempt that ignores its cancellation.
        named: what the warning calls the attempt's argument (``the record at offset 4 of
            partition 1``).
    """

    def ignored(argument: A) -> None:
        log.warning(
            "member %s: the handler of %s ran past attempt_timeout (%gs) and ignores its "
            "cancellation: its key and its partition's stored offset wait until it ends",
            member_id,
            named(argument),
            timeout,
        )

    async def attempt(argument: A) -> object:
        warning = asyncio.get_running_loop().call_later(timeout + GRACE, ignored, argument)
        try:
            with anyio.move_on_after(timeout):
                return await handler(argument)
        finally:
            warning.cancel()
        # Here only when the bound's scope caught its cancellation: a return left above.
        raise AttemptTimeoutError(
            f"the handler ran past attempt_timeout ({timeout:g}s) and was cancelled", timeout
        )

    return attempt
