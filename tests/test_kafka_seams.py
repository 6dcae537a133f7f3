"""The seams under aiokafka (`aio_cluster.kafka.seams`): each use of a private name checked against
the installed aiokafka, and a use that does not fit switched off with one warning naming aiokafka's
version, the member consuming on by the public path.

Where aiokafka's own classes can be made to look as a later aiokafka would (a method whose
parameters changed, a Metadata version the one-pass reader does not know), the test changes them
so; where a private name is an object's attribute that aiokafka's own code reads (which a rename
in aiokafka would rename there too), the check is shown to refuse an object that lacks it, and
the member is shown to consume with that use off."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

import aiokafka
import pytest
from aiokafka.client import AIOKafkaClient
from aiokafka.cluster import ClusterMetadata
from aiokafka.consumer.fetcher import Fetcher as AiokafkaFetcher
from aiokafka.protocol.metadata import MetadataRequest, MetadataRequest_v5

from aio_cluster import ConsumerGroup
from aio_cluster.kafka import seams
from aio_cluster.kafka.metadata import READ_VERSIONS, CompactMetadata
from aio_cluster.kafka.seams import Seam
from aio_cluster.kafka.topics import PartitionKey
from aio_cluster.local import LocalCluster

from conftest import MakeTopic
from support import fetcher_of, fresh, member, numbered_by, producer_of, wait_until

RECORDS = 400


class MetadataRequest_v6(MetadataRequest_v5):  # type: ignore[misc]
    """Metadata v6 as a later aiokafka would send it: Kafka's v6 request and answer are v5's."""

    API_VERSION = 6


def with_parameter(owner: type, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Give ``owner.name`` a keyword parameter more, as a later aiokafka might; it still works."""
    original = getattr(owner, name)

    def changed(self: Any, *args: Any, later: object = None) -> Any:
        return original(self, *args)

    monkeypatch.setattr(owner, name, changed)


def refusing(check: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the check ``check`` of `aio_cluster.kafka.seams` find its names missing."""
    monkeypatch.setattr(seams, check, lambda *args: "a name missing (the test)")


SIMULATED: dict[Seam, Callable[[pytest.MonkeyPatch], None]] = {
    Seam.CLIENT: lambda mp: mp.setattr(seams, "AIOKafkaClient", type("Renamed", (), {})),
    Seam.COMPACT_METADATA: lambda mp: with_parameter(ClusterMetadata, "update_metadata", mp),
    Seam.METADATA_READER: lambda mp: mp.setattr(
        MetadataRequest, "_CLASSES", (*MetadataRequest._CLASSES, MetadataRequest_v6)
    ),
    Seam.FOLLOWED_TOPICS: lambda mp: with_parameter(AIOKafkaClient, "set_topics", mp),
    Seam.FETCH_SESSIONS: lambda mp: with_parameter(AiokafkaFetcher, "_get_actions_per_node", mp),
    Seam.RESPONSE_BOUND: lambda mp: refusing("_check_bound", mp),
    Seam.DROP_PAUSED: lambda mp: refusing("_check_drop", mp),
    Seam.RETRY_BACKOFF: lambda mp: refusing("_check_backoff", mp),
    Seam.FETCH_TASK: lambda mp: refusing("_check_task", mp),
}


FETCHER_USES = [seam for seam in Seam if seam is not Seam.PRODUCER_STOP]
"""The uses a consuming member meets (the producers' one, met only by a stop cut short:
tests/test_exactly_once_producers.py)."""


@pytest.fixture(autouse=True)
def warned_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no use warned about in this process."""
    monkeypatch.setattr(seams, "_warned", set())


@pytest.mark.seams
@pytest.mark.asyncio
async def test_every_use_fits_the_installed_aiokafka(
    cluster: LocalCluster, make_topic: MakeTopic, caplog: pytest.LogCaptureFixture
) -> None:
    topic = await make_topic(partitions=2)
    fetcher = fetcher_of(cluster, topic, fresh("fits"), max_buffered_bytes=1 << 20)
    with caplog.at_level(logging.WARNING, logger="aio_cluster.kafka.seams"):
        await fetcher.start()
        try:
            assert await fetcher.partitions(topic) == [0, 1]
            keys = [PartitionKey(0), PartitionKey(1)]
            fetcher.assign(dict.fromkeys(keys, 0))
            assert await fetcher.fetch(keys, 100) == {}
            view = fetcher._seams
            assert view.off == set(), "a use was switched off"
            assert fetcher._sessions is not None
            assert fetcher._drops
            assert len(fetcher._tasks) == 2
            assert isinstance(fetcher._consumer._client.cluster, CompactMetadata)
        finally:
            await fetcher.stop()
    # The seams' own words only: the worker's earlier tests may leave asyncio a future to report
    # as it is collected meanwhile (CI: a producer's send failed at its close).
    told = [r.getMessage() for r in caplog.records if r.name == "aio_cluster.kafka.seams"]
    assert not told, told


@pytest.mark.parametrize(
    ("check", "owner"),
    [
        ("_check_bound", object()),
        ("_check_drop", object()),
        ("_check_backoff", object()),
        ("_check_task", object()),
        ("_check_client", object()),
        ("_check_producer", object()),
    ],
)
def test_a_check_refuses_an_object_without_its_names(check: str, owner: object) -> None:
    reason = getattr(seams, check)(owner)
    assert isinstance(reason, str)
    assert reason


def test_a_metadata_version_the_reader_does_not_know_does_not_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        MetadataRequest, "_CLASSES", (*MetadataRequest._CLASSES, MetadataRequest_v6)
    )
    assert seams._check_reader(READ_VERSIONS) == (
        "aiokafka may send Metadata v6, which it does not read"
    )


@pytest.mark.seams
@pytest.mark.asyncio
@pytest.mark.parametrize("seam", FETCHER_USES, ids=lambda seam: seam.name.lower())
async def test_a_use_that_does_not_fit_is_warned_once_and_the_member_consumes(
    seam: Seam,
    cluster: LocalCluster,
    make_topic: MakeTopic,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    SIMULATED[seam](monkeypatch)
    topic = await make_topic(partitions=2)
    name = fresh("seam")
    seen: Counter[bytes] = Counter()

    async def pull(group: ConsumerGroup) -> None:
        async for _partition, batch in group:
            seen.update(record.key for record in batch if record.key is not None)

    with caplog.at_level(logging.WARNING, logger="aio_cluster.kafka.seams"):
        # Two members: the warning is once per process, however many meet the misfit.
        members = [member(cluster, name, topic, max_buffered_bytes=1 << 20) for _ in range(2)]
        async with producer_of(cluster) as producer, members[0], members[1]:
            await numbered_by(producer, topic)(0, RECORDS)
            pulls = [asyncio.ensure_future(pull(group)) for group in members]
            try:
                await wait_until(lambda: sum(seen.values()) >= RECORDS, what="every record")
            finally:
                for group in members:
                    await group.close()
                await asyncio.gather(*pulls, return_exceptions=True)
    assert set(seen) == {f"k{i}".encode() for i in range(RECORDS)}, "a record was lost"
    assert set(seen.values()) == {1}, "a record came twice"
    warnings = [r.getMessage() for r in caplog.records if r.name == "aio_cluster.kafka.seams"]
    assert len(warnings) == 1, warnings
    assert f"aiokafka {aiokafka.__version__}: {seam.value} does not fit" in warnings[0]
