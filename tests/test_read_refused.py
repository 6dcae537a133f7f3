"""A member whose reads Kafka refuses (its principal's Read ACL revoked, on a SASL cluster with
Kafka's authorizer) against the real servers: the application gets the typed `ReadRefusedError`
naming the broker and the error, and, as the member keeps asking, its partitions move to a
member that can read them within ``fetch_timeout`` and a few seconds."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from aiokafka import AIOKafkaProducer

from aio_cluster import ReadRefusedError
from aio_cluster.local import LocalCluster

from secured import sasl_member, topic_on
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
