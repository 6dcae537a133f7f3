"""Liveness: how long ZooKeeper has been silent, and what a member may still do.

A member's claims are ephemeral nodes of its session, and the server drops the session when it
hears nothing from it for the negotiated timeout ``T``; the next owner may then start at once. A
member cut off from ZooKeeper hears of that only when the network heals (kazoo reports the loss
on reconnection), so it must not wait for the news. It knows a lower bound on the expiry: the
server heard from the session no earlier than the last request it answered was sent
(`ZooKeeper.heard_at`), so the session lives at least until ``heard_at + T``.

From the silence ``s`` (now minus ``heard_at``) `phase()` decides:

- ``s < T/2``: live.
- ``T/2 <= s < 3T/4``: silent: nothing starts (no batch, no record), what runs runs on, since
  the connection may come back on the same session.
- ``s >= 3T/4``: expiring: the batches in flight are given up (read again later from their first
  unfinished record, unstored), and the handlers of ``process()`` cancelled and awaited, at most
  ``T/8``; one that ignores its cancellation is named in a warning.

So a member cut off starts nothing after ``T/2`` of silence and has ended its handlers by
``7T/8`` plus one `tick()`: ahead of the earliest expiry by ``T/12`` at least (1 s for the
default 10 s). While live, a heartbeat keeps the silence short: a ping whenever nothing was
answered for ``T/6``, so that a healthy member never looks silent (kazoo's own pings go only
after ``T/3`` without requests, and a cut with requests in flight goes unnoticed until its read
timeout, ``2T/3``).

The processing resumes once the session is connected and answers again; a lost session's claims
are made afresh by the rebalance that `Liveness` asks for then.
"""

from __future__ import annotations

import enum
import logging
import math
import time
from collections.abc import Callable

import anyio

from ...errors import CoordinationError
from ...zookeeper.client import ZooKeeper
from ...zookeeper.values import SessionState
from ..delivery.delivery import Delivery

__all__ = ["Liveness", "Phase", "phase"]

log = logging.getLogger(__name__)


class Phase(enum.Enum):
    """What a member may do after a silence of ZooKeeper (see the module)."""

    LIVE = "live"
    SILENT = "silent"
    EXPIRING = "expiring"


def phase(silence: float, timeout: float) -> Phase:
    """The phase after ``silence`` seconds without an answer, of a session that expires after
    ``timeout`` seconds without a request."""
    if silence < timeout / 2:
        return Phase.LIVE
    if silence < timeout * 3 / 4:
        return Phase.SILENT
    return Phase.EXPIRING


def tick(timeout: float) -> float:
    """Seconds between two looks at the silence: often enough that the expiring phase's work
    ends well ahead of the expiry."""
    return min(timeout / 24, 0.25)


class Liveness:
    """Suspends and resumes a member's delivery as ZooKeeper's silence and the session's state
    say (see the module)."""

    def __init__(
        self,
        zk: ZooKeeper,
        delivery: Delivery,
        *,
        member_id: str,
        on_back: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Args:
        zk: the member's ZooKeeper client (its `heard_at` and `negotiated_timeout`).
        delivery: the member's delivery, suspended and resumed here.
        member_id: named in log messages.
        on_back: called when the member may go on again: what happened meanwhile is unknown,
            so it asks for a rebalance.
        clock: ``time.monotonic`` (the clock of `ZooKeeper.heard_at`).
        """
        self._zk = zk
        self._delivery = delivery
        self._id = member_id
        self._on_back = on_back
        self._clock = clock
        self._connected = True
        """False from a suspended or lost session until it is connected again."""
        self._held = False
        """True while this suspended the delivery."""
        self._let_go = False
        """True once the batches in flight were given up in this silence."""
        self._live_until = -math.inf
        """Until when (the clock's time) the phase is LIVE, as last worked out by `fresh()`."""
        delivery.fresh = self.fresh

    def silence(self) -> float:
        """Seconds since the server last heard from the session, as far as the client knows."""
        return self._clock() - self._zk.heard_at

    def fresh(self) -> bool:
        """Whether something may start now: the session is connected and was heard from within
        half its timeout. When not, the delivery is suspended at once (a frozen process that
        wakes up starts nothing before the next look)."""
        # phase() is LIVE until half the timeout after heard_at; the moment is kept, since
        # process() asks before every record, and found again only once it passed.
        if self._connected:
            now = self._clock()
            if now < self._live_until:
                return True
            self._live_until = self._zk.heard_at + self._zk.negotiated_timeout / 2
            if now < self._live_until:
                return True
        self._hold()
        return False

    def on_state(self, state: SessionState) -> None:
        """The session's state changed (kazoo's report)."""
        self._live_until = -math.inf  # a new connection may have a shorter timeout
        if state is SessionState.CONNECTED:
            self._connected = True
            self._step()
        elif state in (SessionState.SUSPENDED, SessionState.LOST):
            self._connected = False
            self._hold()
            if state is SessionState.LOST and not self._let_go:
                # Heard late (the member was frozen, or the network was back): the claims are
                # gone, so nothing in flight may be stored or go on.
                self._let_go = True
                self._delivery.abandon(self._delivery.in_flight)

    async def run(self) -> None:
        """Watch the silence and keep it short, until cancelled."""
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._heartbeat)
            while True:
                if self._step() and not self._let_go:
                    self._let_go = True
                    await self._give_up()
                await anyio.sleep(tick(self._zk.negotiated_timeout))

    def _step(self) -> bool:
        """Suspend or resume as the silence says; True when the session may expire any
        moment."""
        now = phase(self.silence(), self._zk.negotiated_timeout)
        if now is Phase.LIVE:
            if self._held and self._connected:
                self._held = False
                self._let_go = False
                log.info("member %s: ZooKeeper answers again; processing goes on", self._id)
                self._delivery.resume()
                self._on_back()
            return False
        self._hold()
        return now is Phase.EXPIRING

    def _hold(self) -> None:
        if not self._held:
            self._held = True
            log.warning(
                "member %s: ZooKeeper silent for %.1fs (session timeout %gs) or disconnected: "
                "nothing starts until it answers",
                self._id,
                self.silence(),
                self._zk.negotiated_timeout,
            )
            self._delivery.suspend()

    async def _give_up(self) -> None:
        """The session may expire any moment: let go of the work in flight (see the module)."""
        timeout = self._zk.negotiated_timeout
        log.warning(
            "member %s: ZooKeeper silent for %.1fs of its %gs session: giving up the batches in "
            "flight before the session may expire",
            self._id,
            self.silence(),
            timeout,
        )
        lingering = await self._delivery.let_go(timeout / 8)
        for partition, records in lingering.items():
            for record in records:
                log.warning(
                    "member %s: the handler of the record at offset %d of partition %d ignores "
                    "its cancellation while the session may expire: another member may handle "
                    "that partition beside it",
                    self._id,
                    record.offset,
                    partition,
                )

    async def _heartbeat(self) -> None:
        """Ping whenever nothing was answered for a sixth of the timeout."""
        while True:
            timeout = self._zk.negotiated_timeout
            due = timeout / 6 - self.silence()
            if due > 0:
                await anyio.sleep(due)
                continue
            with anyio.move_on_after(timeout / 4):
                try:
                    await self._zk.ping()
                    continue
                except CoordinationError:
                    pass
            # Not answered (disconnected, or the answer is late): look again shortly.
            await anyio.sleep(tick(timeout))
