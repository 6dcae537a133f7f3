"""The dashboard's periodic reads: every ``interval`` seconds one look at each group (the look
``aio-cluster describe`` takes, `aio_cluster.operator.looks.look`), recorded in its
`GroupHistory`, and whether each server answered.

Cost per refresh, for a group of P partitions in T topics: ZooKeeper ``2 + 2T`` child listings,
one read per member and ``2P`` node reads (owner and offset of each partition), the operator's
controls (a listing per kind and per topic with any, a read per control; `looks.look` reads
them) and the newest `EVENTS_SHOWN` entries of their history; Kafka
one metadata request per topic and two ListOffsets round trips per topic. Nothing is read per
browser: every page and event stream is drawn from the last refresh.

A server that does not answer is said so (`Reachability`) and tried again at the next refresh; a
ZooKeeper client that failed is closed and a new one opened then, so that an expired session or
a restarted ensemble is recovered from without restarting the dashboard.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence

import anyio

from ..control.store import ControlStore
from ..errors import AioClusterError, BrokerError, CoordinationError
from ..kafka.offset_reader import OffsetReader
from ..operator import looks, survey
from ..operator.connection import Connection
from ..operator.health import Thresholds
from ..zookeeper.client import ZooKeeper
from .history import GroupHistory, Reachability

__all__ = ["EVENTS_SHOWN", "Watcher"]

EVENTS_SHOWN = 20
"""The newest entries of a group's control history read at each refresh, for its page."""


class Watcher:
    """Looks at the groups every ``interval`` seconds while `run` runs; pages read its
    `histories`, `zookeeper` and `kafka`, and wait for the next refresh with `next_refresh`.

    The ZooKeeper and Kafka clients are opened by `run` and closed when it ends (also when it
    is cancelled); `clients` lends them to a reset made from the page.
    """

    def __init__(
        self,
        connection: Connection,
        groups: Sequence[str],
        *,
        interval: float,
        keep: float,
        window: float,
        thresholds: Thresholds,
    ) -> None:
        self.connection = connection
        self.groups = list(groups)
        self.interval = interval
        self.keep = keep
        self.window = window
        self.thresholds = thresholds
        # The groups named have their page from the start, before the first look.
        self.histories = {group: self._history(group) for group in self.groups}
        self.zookeeper = Reachability("ZooKeeper")
        self.kafka = Reachability("Kafka")
        self.refreshed_at: float | None = None
        self._refreshed = anyio.Event()
        self._zk: ZooKeeper | None = None
        self._zk_exit = contextlib.AsyncExitStack()
        self._kafka: OffsetReader | None = None
        self._kafka_exit = contextlib.AsyncExitStack()
        self._stores: dict[str, tuple[ZooKeeper, ControlStore]] = {}
        """Each group's control store, kept across looks (it warns of a bad node once), with
        the client it reads through."""

    async def run(self) -> None:
        """Refresh every ``interval`` seconds until cancelled; the clients are closed then."""
        try:
            while True:
                await self.refresh()
                await anyio.sleep(self.interval)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self.connection.timeout):
                await self._close_zookeeper()
                await self._close_kafka()

    async def next_refresh(self) -> None:
        """Wait until the next refresh has ended."""
        await self._refreshed.wait()

    def clients(self) -> tuple[ZooKeeper, OffsetReader]:
        """The clients of the last refresh, for a reset.

        Raises:
            CoordinationError: ZooKeeper is not reachable now.
            BrokerError: Kafka is not reachable now.
        """
        if self._zk is None or not self.zookeeper.up:
            raise CoordinationError(f"ZooKeeper is not reachable: {self.zookeeper.reason}")
        if self._kafka is None or not self.kafka.up:
            raise BrokerError(f"Kafka is not reachable: {self.kafka.reason}")
        return self._zk, self._kafka

    async def refresh(self) -> None:
        """One look at every group; each server's reachability is noted."""
        try:
            await self._refresh()
        finally:
            self.refreshed_at = time.time()
            done, self._refreshed = self._refreshed, anyio.Event()
            done.set()

    async def _refresh(self) -> None:
        zk = await self._zookeeper()
        kafka = await self._kafka_reader()
        if zk is None:
            return
        try:
            names = self.groups or await survey.list_groups(zk)
        except CoordinationError as exc:
            await self._zookeeper_failed(exc)
            return
        for name in list(self.histories):
            if name not in names:
                del self.histories[name]
                self._stores.pop(name, None)
        for group in names:
            history = self.histories.setdefault(group, self._history(group))
            if kafka is None:
                continue  # without log ends there is no lag to record; the page says why
            try:
                # The history before the controls: a pause, a resume or a skip asked for is one
                # transaction with its history entry, so such an entry read first has its effect
                # in the rows read after it (a page does not show a resume beside the pause it
                # lifted); a write landing between the two reads shows in the next look's
                # history.
                store = self._store(zk, group)
                events = await store.history(EVENTS_SHOWN)
                members, rows, notes = await looks.look(zk, kafka, group, None, store)
            except CoordinationError as exc:
                await self._zookeeper_failed(exc)
                return
            except BrokerError as exc:
                await self._kafka_failed(exc)
                return
            history.record(time.time(), members, rows, notes)
            history.record_events(events)
        now = time.time()
        self.zookeeper.answered(now)
        if kafka is not None:
            self.kafka.answered(now)

    def _store(self, zk: ZooKeeper, group: str) -> ControlStore:
        """The group's control store kept across looks: a new one with a new client."""
        kept = self._stores.get(group)
        if kept is None or kept[0] is not zk:
            kept = self._stores[group] = (zk, ControlStore(zk, group))
        return kept[1]

    def _history(self, group: str) -> GroupHistory:
        return GroupHistory(group, self.keep, self.window, self.thresholds)

    async def _zookeeper(self) -> ZooKeeper | None:
        if self._zk is None:
            try:
                self._zk = await self._zk_exit.enter_async_context(
                    looks.open_zookeeper(self.connection)
                )
            except AioClusterError as exc:
                await self._zookeeper_failed(exc)
        return self._zk

    async def _kafka_reader(self) -> OffsetReader | None:
        if self._kafka is None:
            try:
                self._kafka = await self._kafka_exit.enter_async_context(
                    looks.open_kafka(self.connection)
                )
            except AioClusterError as exc:
                await self._kafka_failed(exc)
        return self._kafka

    async def _zookeeper_failed(self, exc: AioClusterError) -> None:
        self.zookeeper.failed(time.time(), str(exc))
        await self._close_zookeeper()

    async def _kafka_failed(self, exc: AioClusterError) -> None:
        self.kafka.failed(time.time(), str(exc))
        await self._close_kafka()

    async def _close_zookeeper(self) -> None:
        self._zk = None
        exit_stack, self._zk_exit = self._zk_exit, contextlib.AsyncExitStack()
        await exit_stack.aclose()

    async def _close_kafka(self) -> None:
        self._kafka = None
        exit_stack, self._kafka_exit = self._kafka_exit, contextlib.AsyncExitStack()
        await exit_stack.aclose()
