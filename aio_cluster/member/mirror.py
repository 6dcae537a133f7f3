"""Offsets mirrored to Kafka (``kafka_offsets="mirror"`` or ``"migrate"``): every offset stored in
ZooKeeper is also committed to Kafka's ``__consumer_offsets`` under the group's name, so that
Kafka's own tools (``kafka-consumer-groups.sh``, Burrow, kafka-ui) see the group and its lag.

ZooKeeper stays the truth. A commit Kafka refuses or does not answer is logged, and its offsets go
again with the next commit; the consuming path never waits for Kafka. Only partitions this member
owns are committed, so that a late commit never overwrites what their next owner committed. With
``"migrate"`` a partition that has no offset in ZooKeeper starts at the offset a Kafka consumer
group of the same name committed, so a service moves from such a group to aio_cluster (and back)
without reading anything twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterable, Mapping

from ..errors import BrokerError
from ..kafka.group_offsets import KafkaGroupOffsets
from .claims import Claim

__all__ = ["KafkaMirror"]

log = logging.getLogger(__name__)


class KafkaMirror:
    """A member's side of the mirror; with no Kafka client (``"off"``) every call does nothing."""

    def __init__(
        self, kafka: KafkaGroupOffsets | None, *, member_id: str, migrate: bool, timeout: float
    ) -> None:
        """Args:
        kafka: the group's offsets in Kafka, or None when nothing is mirrored.
        member_id: named in the log.
        migrate: start partitions without a stored offset at the Kafka group's offset.
        timeout: the bound on each commit to Kafka, in seconds.
        """
        self._kafka = kafka
        self._id = member_id
        self._migrate = migrate
        self._timeout = timeout
        self._due: dict[int, int] = {}
        """Offsets stored in ZooKeeper and not yet committed to Kafka."""
        self._lock = asyncio.Lock()
        """Serialises commits, so that a later one never overtakes an earlier one."""
        self._wanted = asyncio.Event()

    async def start(self) -> None:
        """Connect to Kafka.

        Raises:
            BrokerError: no broker answered.
        """
        if self._kafka is not None:
            await self._kafka.start()

    async def stop(self) -> None:
        """Close the connections; offsets not committed by now stay in ZooKeeper only."""
        if self._kafka is not None:
            await self._kafka.stop()

    def stored(self, offsets: Mapping[int, int]) -> None:
        """ZooKeeper stored these offsets (partition -> next offset): commit them soon."""
        if self._kafka is not None and offsets:
            self._due.update(offsets)
            self._wanted.set()

    def forget(self, partitions: Iterable[int] | None = None) -> None:
        """These partitions (None: all) are no longer this member's: never commit them."""
        for partition in list(self._due) if partitions is None else partitions:
            self._due.pop(partition, None)

    async def run(self, claims: Mapping[int, Claim]) -> None:
        """Commit what ZooKeeper stores, as it is stored; runs until cancelled."""
        if self._kafka is None:
            return
        while True:
            await self._wanted.wait()
            self._wanted.clear()
            await self.push(claims, list(claims))

    async def push(self, claims: Mapping[int, Claim], partitions: Iterable[int]) -> None:
        """Commit the due offsets of those of ``partitions`` this member owns, now (before a
        handover and when leaving). A failure is logged; the offsets stay due."""
        if self._kafka is None:
            return
        async with self._lock:
            offsets = {p: self._due[p] for p in partitions if p in self._due and p in claims}
            if not offsets:
                return
            try:
                await self._kafka.commit(offsets, self._timeout)
            except BrokerError as exc:
                log.warning("member %s: offsets not mirrored to Kafka yet: %s", self._id, exc)
                return
            for partition, offset in offsets.items():
                if self._due.get(partition) == offset:
                    del self._due[partition]

    async def take_over(self, partitions: Collection[int]) -> dict[int, int]:
        """With ``"migrate"``: where the given claimed partitions (without a stored offset) start,
        from the offsets the Kafka group committed; the caller positions and stores them
        (ZooKeeper is the truth from then on).

        Returns:
            Partition -> offset, of those the Kafka group committed (none unless migrating).

        Raises:
            BrokerError: Kafka did not tell (the rebalance is tried again: starting anywhere
                else could read messages twice).
        """
        if self._kafka is None or not self._migrate or not partitions:
            return {}
        taken = await self._kafka.committed(list(partitions), self._timeout)
        if taken:
            log.info("member %s goes on from Kafka's offsets %s", self._id, taken)
        return dict(taken)
