"""How often aiokafka's background fetch may end before the fetcher gives up, and which seams a
death switches off: pure bookkeeping, the fetcher's watch (see `aio_cluster.kafka.fetcher`)
does the restarting.

aiokafka fetches in one background task, and its client refreshes the metadata in another; any
error ends either for good. The fetcher then fetches on with a consumer made anew, at most
`RESTARTS` times within `RESTART_WINDOW`: the next death raises `FetchStalledError` (the member
then gives its partitions up). A death whose cause passed through code of this package (a hook
under aiokafka) switches off every seam that runs inside aiokafka's fetch routine
(`IN_FETCH_ROUTINE`), so that the new consumer fetches the public way.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from ..errors import FetchStalledError
from .seams import Seam

__all__ = ["IN_FETCH_ROUTINE", "RESTARTS", "RESTART_WINDOW", "Restarts"]

log = logging.getLogger(__name__)

RESTARTS = 3
"""How often aiokafka's background fetch is started again within `RESTART_WINDOW`."""
RESTART_WINDOW = 300.0

IN_FETCH_ROUTINE = frozenset(
    {Seam.FETCH_SESSIONS, Seam.RESPONSE_BOUND, Seam.COMPACT_METADATA, Seam.DROP_PAUSED}
)
"""The seams whose code runs inside aiokafka's background fetch."""

_PACKAGE = str(Path(__file__).resolve().parent.parent)


def raised_here(error: BaseException) -> bool:
    """Whether ``error``, or an error it was raised from, passed through this package."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        trace = current.__traceback__
        while trace is not None:
            if trace.tb_frame.f_code.co_filename.startswith(_PACKAGE):
                return True
            trace = trace.tb_next
        current = current.__cause__ or current.__context__
    return False


class Restarts:
    """The deaths of one fetcher's background fetch within the last `RESTART_WINDOW`."""

    def __init__(self) -> None:
        self._deaths: list[float] = []

    def died(self, cause: BaseException | None, what: str) -> frozenset[Seam]:
        """Count a death (``what`` happened, of ``cause``); the seams to switch off before
        fetching on (see the module), with a warning saying so.

        Raises:
            FetchStalledError: the `RESTARTS` + 1st death within `RESTART_WINDOW`.
        """
        now = time.monotonic()
        self._deaths = [at for at in self._deaths if now - at < RESTART_WINDOW]
        self._deaths.append(now)
        if len(self._deaths) > RESTARTS:
            raise FetchStalledError(
                f"{what}, {len(self._deaths)} times within {RESTART_WINDOW:g} s; last cause: "
                f"{cause!r}"
            ) from cause
        ours = cause is not None and raised_here(cause)
        log.warning(
            "%s (%r); fetching on with a new consumer from the positions held%s",
            what,
            cause,
            ", without the seams under aiokafka's fetch" if ours else "",
        )
        return IN_FETCH_ROUTINE if ours else frozenset()
