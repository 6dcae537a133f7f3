"""Offsets mirrored to Kafka (``kafka_offsets="mirror"`` or ``"migrate"``): every offset stored in
ZooKeeper is also committed to Kafka's ``__consumer_offsets`` under the group's name, so that
Kafka's own tools (``kafka-consumer-groups.sh``, Burrow, kafka-ui) see the group and its lag.

ZooKeeper stays the truth. A commit Kafka refuses or does not answer is logged, and its offsets go
again with the next commit; the consuming path never waits for Kafka. Only partitions this member
owns are committed, so that a late commit never overwrites what their next owner committed; so a
commit that failed when the partition was handed over is sent again by the next owner, which
mirrors the stored offset it starts from as soon as it claims the partition.

With ``"migrate"`` a newly claimed partition starts at the offset a Kafka consumer group of the
same name committed where that is further than the offset stored in ZooKeeper (or none is
stored), and stores it at once: a service moves from such a group to aio_cluster, back, and
again, without reading twice what either side had read. An offset Kafka committed past the log
end is treated as any stored offset past it (see `aio_cluster.member.delivery.delivery`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping

from ...errors import BrokerError
from ...kafka.group_offsets import KafkaGroupOffsets
from ...kafka.topics import PartitionKey
from ..delivery.claims import Claim

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
        self._due: dict[PartitionKey, int] = {}
        """Offsets stored in ZooKeeper and not yet mirrored to Kafka."""
        self._seen: set[PartitionKey] = set()
        """The claimed partitions already taken over: the rest are new claims."""
        self._lock = asyncio.Lock()
        """Serialises the mirroring, so that a later Kafka commit never overtakes an earlier one."""
        self._wanted = asyncio.Event()

    async def start(self) -> None:
        """Connect to Kafka.

        Raises:
            BrokerError: no broker answered.
        """
        if self._kafka is not None:
            await self._kafka.start()

    async def stop(self) -> None:
        """Close the connections; offsets not mirrored by now stay in ZooKeeper only."""
        if self._kafka is not None:
            await self._kafka.stop()

    def stored(self, offsets: Mapping[PartitionKey, int]) -> None:
        """ZooKeeper stored these offsets (partition -> next offset): mirror them soon."""
        if self._kafka is not None and offsets:
            self._due.update(offsets)
            self._wanted.set()

    def forget(self, partitions: Iterable[PartitionKey] | None = None) -> None:
        """These partitions (None: all) are no longer this member's: never mirror them."""
        for partition in list(self._due) if partitions is None else partitions:
            self._due.pop(partition, None)
        if partitions is None:
            self._seen.clear()
        else:
            self._seen.difference_update(partitions)

    @property
    def enabled(self) -> bool:
        """Whether it mirrors at all (``kafka_offsets`` is not ``"off"``): else `run()` has
        nothing to do."""
        return self._kafka is not None

    async def run(self, claims: Mapping[PartitionKey, Claim]) -> None:
        """Mirror what ZooKeeper stores, as it is stored; runs until cancelled."""
        if self._kafka is None:
            return
        while True:
            await self._wanted.wait()
            self._wanted.clear()
            await self.mirror(claims, list(claims))

    async def mirror(
        self, claims: Mapping[PartitionKey, Claim], partitions: Iterable[PartitionKey]
    ) -> None:
        """Mirror the due offsets of those of ``partitions`` this member owns, now, in one Kafka
        commit (before a handover and when leaving). A failure is logged; the offsets stay due."""
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

    async def take_over(
        self, claims: Mapping[PartitionKey, Claim], start: Callable[[PartitionKey, int], bool]
    ) -> dict[PartitionKey, int]:
        """For the claims new since the last call: with ``"migrate"`` offer each the Kafka
        group's offset through ``start`` (the partition states' `migrated` transition, which
        takes it where it is further than the stored one and stores it at once: ZooKeeper is the
        truth from then on), and mirror the stored offset each of the others starts from (a
        commit of its last owner may have failed).

        Args:
            claims: the member's claims now (read only).
            start: offers a partition the Kafka group's offset; True when it starts there.

        Returns:
            Partition -> offset, of the claims that start at the Kafka group's offset.

        Raises:
            BrokerError: Kafka did not tell (the rebalance is tried again: starting anywhere
                else could read messages twice).
        """
        new = [p for p in claims if p not in self._seen]
        if self._kafka is None or not new:
            return {}
        taken: dict[PartitionKey, int] = {}
        if self._migrate:
            committed = await self._kafka.committed(new, self._timeout)
            taken = {p: offset for p, offset in committed.items() if start(p, offset)}
        if taken:
            log.info("member %s goes on from Kafka's offsets %s", self._id, taken)
        for partition in new:
            claim = claims.get(partition)
            if claim is not None and claim.stored is not None and partition not in taken:
                self._due.setdefault(partition, claim.stored)
                self._wanted.set()
        self._seen.update(new)
        return taken
