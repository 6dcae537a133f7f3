"""The mirror's bookkeeping, with a stand-in for Kafka (what Kafka does is in
test_kafka_offsets.py): what is due, what is retried, what is never committed."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import pytest

from aio_cluster import BrokerError
from aio_cluster.kafka.topics import PartitionKey
from aio_cluster.member.delivery.claims import UNPOSITIONED, Claim
from aio_cluster.member.delivery.partitions import PartitionStates
from aio_cluster.member.protocol.mirror import KafkaMirror

pytestmark = pytest.mark.asyncio


class FakeKafka:
    """Records commits; refuses them while ``refuse`` is set."""

    def __init__(self, committed: dict[int, int] | None = None) -> None:
        self.commits: list[dict[int, int]] = []
        self.refuse = False
        self._committed = committed or {}

    async def commit(self, offsets: Mapping[int, int], timeout: float) -> None:
        if self.refuse:
            raise BrokerError("refused")
        self.commits.append(dict(offsets))

    async def committed(self, partitions: Collection[int], timeout: float) -> dict[int, int]:
        return {p: self._committed[p] for p in partitions if p in self._committed}


P0, P1, P2 = PartitionKey(0), PartitionKey(1), PartitionKey(2)
"""The keys of partitions 0, 1 and 2 (one topic: the keys are the partition ids)."""


def claims(*partitions: PartitionKey, next_offset: int = 0) -> dict[PartitionKey, Claim]:
    return {p: Claim(p, 0, next_offset, None) for p in partitions}


def mirror(kafka: Any, *, migrate: bool = False) -> KafkaMirror:
    return KafkaMirror(kafka, member_id="m", migrate=migrate, timeout=1.0)


async def test_a_refused_commit_goes_again_with_the_next() -> None:
    kafka = FakeKafka()
    side, owned = mirror(kafka), claims(P0, P1)
    side.stored({P0: 5, P1: 7})
    kafka.refuse = True
    await side.mirror(owned, [P0, P1])
    assert kafka.commits == []
    kafka.refuse = False
    side.stored({P0: 6})
    await side.mirror(owned, [P0, P1])
    assert kafka.commits == [{0: 6, 1: 7}]
    await side.mirror(owned, [P0, P1])
    assert kafka.commits == [{0: 6, 1: 7}], "nothing is due twice"


async def test_only_owned_and_not_forgotten_partitions_are_committed() -> None:
    kafka = FakeKafka()
    side = mirror(kafka)
    side.stored({P0: 1, P1: 2, P2: 3})
    side.forget([P1])
    await side.mirror(claims(P0, P1), [P0, P1, P2])
    assert kafka.commits == [{0: 1}]
    side.stored({P0: 4})
    side.forget()
    await side.mirror(claims(P0), [P0])
    assert kafka.commits == [{0: 1}]


async def test_off_does_nothing() -> None:
    side = mirror(None, migrate=True)
    side.stored({P0: 1})
    owned = claims(P0, next_offset=UNPOSITIONED)
    await side.mirror(owned, [P0])
    states = PartitionStates()
    states.claimed(owned[P0])
    assert await side.take_over(states.claims, states.commits.migrated) == {}
    await side.run(owned)  # returns at once
    assert owned[P0].next_offset == UNPOSITIONED


@pytest.mark.parametrize("migrate", [True, False])
async def test_migrate_starts_unpositioned_claims_at_kafkas_offsets(migrate: bool) -> None:
    side = mirror(FakeKafka({0: 40, 1: 50}), migrate=migrate)
    states = PartitionStates()
    for claim in claims(P0, P1, P2, next_offset=UNPOSITIONED).values():
        states.claimed(claim)
    states.sought(P1, 9)
    taken = await side.take_over(states.claims, states.commits.migrated)
    assert taken == ({0: 40} if migrate else {})
    owned = states.claims
    if migrate:
        assert (owned[P0].next_offset, owned[P0].pending) == (40, 40)
    else:
        assert (owned[P0].next_offset, owned[P0].pending) == (UNPOSITIONED, None)
    assert (owned[P1].next_offset, owned[P1].pending) == (9, None), "a seek came first"
    assert owned[P2].next_offset == UNPOSITIONED, "no Kafka offset: positioned as usual"


async def test_a_new_claim_mirrors_the_offset_it_starts_from_once() -> None:
    """The last owner's commit may have failed at the handover: the next owner sends it."""
    kafka = FakeKafka()
    side = mirror(kafka)
    states = PartitionStates()
    states.claimed(Claim(P0, 0, 7, 7))
    states.claimed(Claim(P1, 0, UNPOSITIONED, None))
    owned = states.claims
    await side.take_over(owned, states.commits.migrated)
    await side.mirror(owned, [P0, P1])
    assert kafka.commits == [{0: 7}]
    await side.take_over(owned, states.commits.migrated)
    await side.mirror(owned, [P0, P1])
    assert kafka.commits == [{0: 7}], "only a new claim is mirrored on its own"
    side.forget([P0])
    await side.take_over(owned, states.commits.migrated)
    await side.mirror(owned, [P0, P1])
    assert kafka.commits == [{0: 7}, {0: 7}], "claimed again after a release: new again"


async def test_migrating_again_goes_on_from_the_further_offset() -> None:
    """Moved to aio_cluster, back to a Kafka group that read on, and here again: Kafka's offset
    is further than the one ZooKeeper kept, and is taken; one behind ZooKeeper's is not."""
    kafka = FakeKafka({0: 40, 1: 10})
    side = mirror(kafka, migrate=True)
    states = PartitionStates()
    states.claimed(Claim(P0, 0, 20, 20))
    states.claimed(Claim(P1, 0, 30, 30))
    owned = states.claims
    assert await side.take_over(owned, states.commits.migrated) == {0: 40}
    assert (owned[P0].next_offset, owned[P0].pending) == (40, 40)
    assert (owned[P1].next_offset, owned[P1].pending) == (30, None)
    await side.mirror(owned, [P0, P1])
    assert kafka.commits == [{1: 30}], "the taken offset is mirrored once ZooKeeper stores it"
