"""StuckWatch: a member whose oldest handler or batch body has run past ``stuck_after``, told.

A handler of ``process()`` (``process_bulk()``) that never returns, or a body of ``async for``
that never ends, holds its partition's stored offset while the member looks healthy: its session
holds, its claims stay. The watch looks at what runs, every `tick()` seconds:

- a record in ``process()``: its current attempt of the handler from its start, or the wait after
  a failure (a back-off, the dead letter's sending) from the failure; in ``process_bulk()``, the
  same of its call. A record retried with bounded attempts is not stuck; one attempt that runs
  past the bound is;
- a batch handed out by ``async for`` (or ``transactions()``): from its hand-out until its body
  ended (the loop asked for the next batch, broke or raised).

The oldest of each partition that has run past ``stuck_after`` makes the partition stuck: it is
logged once, shown in ``statistics()`` (hence the metrics and the dashboard), and published for
the tools (``aio-cluster describe``, ``check``'s ``stuck`` verdict) as an ephemeral node of the
member's session, ``control/stuck/<topic>/<partition>/<member>``
(`aio_cluster.control.model.Stuck`): one per member, so that the handler of an old owner that
outlived a handover and the new owner's, stuck on the same record, never clear each other's.
The node is written only when a partition becomes stuck (or another record or batch of it does)
and removed when it no longer is: a member where nothing hangs writes nothing, so an idle
member costs ZooKeeper only its pings.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import anyio

from ..control.model import Stuck, StuckKind
from ..control.store import ControlStore
from ..errors import CoordinationError
from ..kafka.topics import PartitionKey
from ..zookeeper.client import ZooKeeper
from ..zookeeper.values import SessionState
from .protocol.keyed_layout import KeyedLayout

__all__ = ["Running", "StuckWatch"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Running:
    """A handler or batch body running now."""

    partition: PartitionKey
    kind: StuckKind
    offset: int
    """The record the handler runs for; the first record of the body's batch."""
    started: float
    """When it started (``time.monotonic()``)."""


class StuckWatch:
    """What runs in a member, and which partitions are stuck (see the module)."""

    def __init__(
        self,
        zk: ZooKeeper,
        layout: KeyedLayout,
        *,
        member_id: str,
        stuck_after: float,
        handlers: Callable[[], Iterable[tuple[PartitionKey, int, float]]],
    ) -> None:
        """Args:
        zk: the member's ZooKeeper client (the marks are ephemeral nodes of its session).
        layout: the group's paths, by partition key.
        member_id: named in the marks and the logs.
        stuck_after: seconds a handler or body may run before its partition is stuck.
        handlers: the records in flight in ``process()`` now: partition, offset, start.
        """
        self._zk = zk
        self._layout = layout
        self._id = member_id
        self.stuck_after = stuck_after
        self._handlers = handlers
        self._store = ControlStore(zk, layout.group)
        self._bodies: dict[int, Running] = {}
        self._tokens = itertools.count()
        self._published: dict[PartitionKey, Running] = {}
        """Partitions published stuck by this session -> what was published."""
        self._told: set[Running] = set()
        """What was logged stuck, until it ends."""

    # -- what runs ---------------------------------------------------------------------------

    def body_started(self, partition: PartitionKey, offset: int) -> int:
        """A batch of ``partition`` (its first record at ``offset``) was handed out to a loop
        body.

        Returns:
            The token `body_ended()` takes.
        """
        token = next(self._tokens)
        self._bodies[token] = Running(partition, "body", offset, time.monotonic())
        return token

    def body_ended(self, token: int) -> None:
        """The body of `body_started()`'s batch ended."""
        self._bodies.pop(token, None)

    def running(self) -> dict[PartitionKey, Running]:
        """The oldest handler or body of each partition where one runs."""
        oldest: dict[PartitionKey, Running] = {}
        found = [
            *(Running(p, "handler", offset, at) for p, offset, at in self._handlers()),
            *self._bodies.values(),
        ]
        for item in found:
            known = oldest.get(item.partition)
            if known is None or item.started < known.started:
                oldest[item.partition] = item
        return oldest

    def oldest(self) -> float | None:
        """Seconds the oldest handler or body has run, None when none runs."""
        starts = [item.started for item in self.running().values()]
        return time.monotonic() - min(starts) if starts else None

    def stuck(self) -> dict[PartitionKey, Running]:
        """The partitions whose oldest handler or body has run past ``stuck_after``."""
        bound = time.monotonic() - self.stuck_after
        return {key: item for key, item in self.running().items() if item.started <= bound}

    # -- telling -----------------------------------------------------------------------------

    def tick(self) -> float:
        """Seconds between two looks: a quarter of ``stuck_after``, between 0.05 and 5."""
        return min(max(self.stuck_after / 4, 0.05), 5.0)

    async def run(self) -> None:
        """Look every `tick()` seconds and publish what changed, until cancelled; a write that
        fails is logged and tried again at the next look."""
        forget = self._zk.on_state_change(self._on_session)
        try:
            while True:
                try:
                    await self.look()
                except CoordinationError as exc:
                    log.warning("member %s: publishing stuck partitions failed: %s", self._id, exc)
                await anyio.sleep(self.tick())
        finally:
            forget()

    def _on_session(self, state: SessionState) -> None:
        if state is SessionState.LOST:
            self._published.clear()  # the marks went with the session

    async def look(self) -> None:
        """Log what became stuck, and publish the changes since the last look (only while the
        session is connected: the marks are its nodes)."""
        stuck = self.stuck()
        self._tell(stuck)
        if self._zk.state is not SessionState.CONNECTED:
            return
        for key in [key for key in self._published if key not in stuck]:
            tp = self._layout.keys.split(key)
            await self._store.clear_stuck(tp.topic, tp.partition, self._id)
            del self._published[key]
        for key, item in stuck.items():
            if self._published.get(key) == item:
                continue
            tp = self._layout.keys.split(key)
            since = time.time() - (time.monotonic() - item.started)
            await self._store.publish_stuck(
                Stuck(tp.topic, tp.partition, self._id, item.kind, item.offset, since)
            )
            self._published[key] = item

    def _tell(self, stuck: dict[PartitionKey, Running]) -> None:
        now = set(stuck.values())
        for item in now - self._told:
            what = (
                f"the handler of the record at offset {item.offset}"
                if item.kind == "handler"
                else f"the loop body of the batch at offset {item.offset}"
            )
            log.warning(
                "member %s: %s of %s has run for %.0fs, past stuck_after (%gs): the partition "
                "makes no progress meanwhile",
                self._id,
                what,
                self._layout.label(item.partition),
                time.monotonic() - item.started,
                self.stuck_after,
            )
        self._told = now
