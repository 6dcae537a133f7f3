"""Eager steps: a coroutine's first step run at once, inside the running task, and the rest of
it awaited later as ``await`` would have awaited it from the start.

This is what asyncio's eager tasks do for a new task's first step (Python 3.12), here for a
coroutine a worker task runs itself: `aio_cluster.member.processing.workers` steps a handler, or a
run of handlers in place, once and learns whether it finished without waiting (``StopIteration``),
in which case no other task ran meanwhile and the records need none of the bookkeeping that other
tasks look at.
"""

from __future__ import annotations

import types
from collections.abc import Coroutine, Generator
from typing import Any

__all__ = ["resumed"]


@types.coroutine
def resumed(steps: Coroutine[Any, Any, object], waiting_on: Any) -> Generator[Any, Any, object]:
    """The rest of the coroutine ``steps``, whose first step yielded ``waiting_on``: awaiting
    this runs it on as ``await`` would have from its start. What the task sends or throws in (a
    cancellation) goes on to it; closing the awaiting coroutine closes it too.

    Returns:
        What ``steps`` returns.
    """
    while True:
        try:
            sent = yield waiting_on
        except GeneratorExit:
            steps.close()
            raise
        except BaseException as exc:
            try:
                waiting_on = steps.throw(exc)
            except StopIteration as end:
                return end.value
        else:
            try:
                waiting_on = steps.send(sent)
            except StopIteration as end:
                return end.value
