"""A member whose reads Kafka refuses (its principal's Read ACL revoked, on a SASL cluster with
Kafka's authorizer) against the real servers: the application gets the typed `ReadRefusedError`
naming the broker and the error, and, as the member keeps asking, its partitions move to a
member that can read them within ``fetch_timeout`` and a few seconds."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest
from aiokafka import AIOKafkaProducer
from kazoo.client import KazooClient
from kazoo.recipe.watchers import DataWatch

from aio_cluster import ReadRefusedError
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.layout import GroupLayout

from secured import ZK_PASSWORD, sasl_member, topic_on
from support import fresh, wait_until

pytestmark = pytest.mark.asyncio

FETCH_TIMEOUT = 5.0


async def test_a_member_refused_its_reads_gets_the_typed_error_and_its_partitions_move(
    sasl_cluster: LocalCluster, sasl_producer: AIOKafkaProducer
) -> None:
    topic = await topic_on(sasl_cluster, 2)
    user = fresh("member")
    options = await sasl_cluster.add_user(user)
    await sasl_cluster.grant(user, "Read", topic=topic)
    group = fresh("refused")
    refused = sasl_member(
        sasl_cluster, group, topic, kafka_options=options, fetch_timeout=FETCH_TIMEOUT
    )
    other = sasl_member(sasl_cluster, group, topic, fetch_timeout=FETCH_TIMEOUT)
    errors: list[ReadRefusedError] = []

    async def read_on() -> None:
        """The application: it iterates again after each refusal."""
        while True:
            try:
                async for _partition, _batch in refused:
                    pass
            except ReadRefusedError as exc:
                errors.append(exc)
                await asyncio.sleep(0.1)

    async with refused, other:
        await wait_until(
            lambda: len(refused.claimed) == len(other.claimed) == 1, what="both members joined"
        )
        reading = asyncio.create_task(read_on())
        try:
            await sasl_cluster.revoke(user, "Read", topic=topic)
            for partition in range(2):
                await sasl_producer.send_and_wait(topic, b"x", partition=partition)
            await wait_until(lambda: bool(errors), what="the refusal reaches the application")
            error = errors[0]
            assert error.topic == topic
            assert error.error == "TopicAuthorizationFailedError"
            assert error.broker is not None
            assert f"broker {error.broker}" in str(error)
            await wait_until(
                lambda: sorted(other.claimed) == [0, 1],
                timeout=FETCH_TIMEOUT + 20,
                what="the other member took the refused member's partition",
            )
            assert refused.claimed == []
        finally:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading


async def test_a_member_refused_read_but_allowed_describe_stays_off_until_read_comes_back(
    sasl_cluster: LocalCluster,
    sasl_producer: AIOKafkaProducer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The probe asks with the read that failed: a principal that lost Read but keeps Describe
    (a ListOffsets is answered to it) has its probes refused, so its partition stays with the
    other member, probe after probe; once Read is back, it takes its share again."""
    caplog.set_level(logging.DEBUG, logger="aio_cluster.member.protocol.marks")
    topic = await topic_on(sasl_cluster, 2)
    user = fresh("member")
    options = await sasl_cluster.add_user(user)
    await sasl_cluster.grant(user, "Read", "Describe", topic=topic)
    group = fresh("refused")
    refused = sasl_member(
        sasl_cluster, group, topic, kafka_options=options, fetch_timeout=FETCH_TIMEOUT
    )
    other = sasl_member(sasl_cluster, group, topic, fetch_timeout=FETCH_TIMEOUT)

    async def read_on() -> None:
        """The application: it iterates again after each refusal."""
        while True:
            with contextlib.suppress(ReadRefusedError):
                async for _partition, _batch in refused:
                    pass
            await asyncio.sleep(0.1)

    def refusals() -> int:
        """The refused member's probes refused so far (each at least half a fetch_timeout
        after the one before)."""
        return sum(
            "probe was refused" in record.getMessage() and refused.id in record.getMessage()
            for record in caplog.records
        )

    watcher = KazooClient(
        hosts=sasl_cluster.zookeeper, auth_data=[("digest", f"member:{ZK_PASSWORD}")]
    )
    await asyncio.to_thread(watcher.start)
    async with refused, other:
        await wait_until(
            lambda: len(refused.claimed) == len(other.claimed) == 1, what="both members joined"
        )
        reading = asyncio.create_task(read_on())
        try:
            await sasl_cluster.revoke(user, "Read", topic=topic)
            for number in range(2):
                await sasl_producer.send_and_wait(topic, b"x", partition=number)
            await wait_until(
                lambda: sorted(other.claimed) == [0, 1],
                timeout=FETCH_TIMEOUT + 20,
                what="the other member took the refused member's partition",
            )
            # Every owner the claim nodes hold from now on, as ZooKeeper tells it (the member's
            # share may come back as either partition).
            owners: list[str | None] = []
            layout = GroupLayout(group, topic)
            for number in range(2):
                DataWatch(
                    watcher,
                    layout.owner(number),
                    lambda data, _stat: owners.append(None if data is None else data.decode()),
                )
            # Five refused probes, each half a fetch_timeout or more after the one before: a
            # window of over 2 x fetch_timeout, within which a probe answered by a ListOffsets
            # would have given the partition back (as it did before the probe fetched).
            first = refusals()
            await wait_until(
                lambda: refusals() >= first + 5,
                timeout=4 * FETCH_TIMEOUT + 20,
                what="five probes refused",
            )
            assert owners
            assert refused.id not in owners, owners
            assert refused.claimed == []
            assert sorted(other.claimed) == [0, 1]
            statistics = await refused.statistics()
            assert statistics.unreadable_error == "TopicAuthorizationFailedError"

            await sasl_cluster.grant(user, "Read", topic=topic)
            await wait_until(
                lambda: len(refused.claimed) == len(other.claimed) == 1,
                timeout=FETCH_TIMEOUT + 20,
                what="the member took its share again once Read was back",
            )
        finally:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
            await asyncio.to_thread(watcher.stop)
            watcher.close()
