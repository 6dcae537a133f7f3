"""A fully secured group against a real local cluster: Kafka over SASL_SSL with SCRAM-SHA-512,
ZooKeeper with digest credentials and the creator ACL. It consumes exactly once; a wrong password
is one typed error naming the server and the user; no secret shows in logs, reprs or errors."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from aio_cluster import AuthenticationError, ConsumerGroup, GroupState, KafkaOptions
from aio_cluster.local import LocalCluster

from support import consume_exactly_once

CONNECT_BOUND = 30.0
"""Seconds a refused connection may take to be reported: far below a retry loop's forever."""
ZK_PASSWORD = "zk-Secret-4711"
WRONG_PASSWORD = "not-the-Password-0815"


@pytest_asyncio.fixture(scope="module")
async def sasl_cluster() -> AsyncIterator[LocalCluster]:
    async with LocalCluster(sasl=True) as started:
        yield started


@pytest_asyncio.fixture(scope="module")
async def sasl_producer(sasl_cluster: LocalCluster) -> AsyncIterator[AIOKafkaProducer]:
    producer = AIOKafkaProducer(
        bootstrap_servers=sasl_cluster.bootstrap, linger_ms=5, **sasl_cluster.kafka_options
    )
    await producer.start()
    yield producer
    await producer.stop()


async def _topic(cluster: LocalCluster, partitions: int) -> str:
    name = f"sasl-{uuid.uuid4().hex[:12]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap, **cluster.kafka_options)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()
    return name


def _member(cluster: LocalCluster, group: str, topic: str, **options: object) -> ConsumerGroup:
    options.setdefault("kafka_options", cluster.kafka_options)
    options.setdefault("zookeeper_auth", [("digest", f"member:{ZK_PASSWORD}")])
    options.setdefault("zookeeper_acl", "creator")
    return ConsumerGroup(
        group, cluster.bootstrap, cluster.zookeeper, topic, loop_delay=0.1, **options
    )  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_a_group_consumes_exactly_once_over_sasl_ssl_scram(
    sasl_cluster: LocalCluster, sasl_producer: AIOKafkaProducer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(1)  # everything: aiokafka's and kazoo's debug output included
    options = sasl_cluster.kafka_options
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    password = options["sasl_plain_password"]
    topic = await _topic(sasl_cluster, 4)
    group = f"sasl-group-{uuid.uuid4().hex[:8]}"

    async def produce(start: int, count: int) -> None:
        for i in range(start, start + count):
            await sasl_producer.send(topic, key=f"k{i}".encode(), value=str(i).encode())
        await sasl_producer.flush()

    members = [_member(sasl_cluster, group, topic) for _ in range(2)]
    shown = [repr(options), str(options), *(repr(m) for m in members)]
    shown += [repr(vars(m)) for m in members]

    async def look() -> None:
        shown.extend([repr(await m.statistics()) for m in members])
        shown.extend(repr(m) for m in members)

    seen = await consume_exactly_once(members, produce, 400, joined=look)
    assert len(shown) == 10
    assert sorted(seen) == sorted(f"k{i}".encode() for i in range(400))
    assert set(seen.values()) == {1}, "a message was delivered twice"

    assert "Authenticated as aio-cluster via SCRAM-SHA-512" in caplog.text, "nothing captured"
    for secret in (password, ZK_PASSWORD):
        assert secret not in caplog.text
        assert all(secret not in text for text in shown)


@pytest.mark.asyncio
async def test_a_wrong_password_is_one_typed_error_naming_server_and_user(
    sasl_cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(1)
    topic = await _topic(sasl_cluster, 1)
    options = KafkaOptions({**sasl_cluster.kafka_options, "sasl_plain_password": WRONG_PASSWORD})
    group = _member(sasl_cluster, "wrong-password", topic, kafka_options=options)
    with pytest.raises(AuthenticationError) as raised:
        await asyncio.wait_for(group.register(), CONNECT_BOUND)
    assert group.state is GroupState.CLOSED
    error = raised.value
    assert f"Kafka {sasl_cluster.bootstrap} refused" in str(error)
    assert "'aio-cluster'" in str(error)
    assert not error.retriable
    chain = [error, error.__cause__, error.__context__]
    for secret in (WRONG_PASSWORD, sasl_cluster.kafka_options["sasl_plain_password"]):
        assert all(secret not in repr(link) and secret not in str(link) for link in chain)
        assert secret not in caplog.text
        assert secret not in repr(group)
        assert secret not in repr(vars(group))
    assert any(record.levelno >= logging.ERROR for record in caplog.records), "nothing captured"


@pytest.mark.asyncio
async def test_tls_without_sasl_is_told_the_server_expects_sasl(sasl_cluster: LocalCluster) -> None:
    topic = await _topic(sasl_cluster, 1)
    options = KafkaOptions(
        security_protocol="SSL", ssl_context=sasl_cluster.kafka_options["ssl_context"]
    )
    group = _member(sasl_cluster, "no-sasl", topic, kafka_options=options)
    with pytest.raises(AuthenticationError, match="without SASL") as raised:
        await asyncio.wait_for(group.register(), CONNECT_BOUND)
    assert sasl_cluster.bootstrap in str(raised.value)
