"""A fully secured group against a real local cluster: Kafka over SASL_SSL with SCRAM-SHA-512,
ZooKeeper with digest credentials and the creator ACL. It consumes exactly once; a wrong password
is one typed error naming the server and the user; no secret shows in logs, reprs or errors.
Kafka's authorizer refuses a second user what its ACLs do not allow, and `grant()` and
`revoke()` change that."""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import TopicAuthorizationFailedError, TransactionalIdAuthorizationFailed

from aio_cluster import AuthenticationError, ConfigurationError, GroupState, KafkaOptions
from aio_cluster.local import LocalCluster

from secured import ZK_PASSWORD, sasl_member, topic_on
from support import consume_exactly_once, fresh, numbered_by, wait_until

CONNECT_BOUND = 30.0
"""Seconds a refused connection may take to be reported: far below a retry loop's forever."""
WRONG_PASSWORD = "not-the-Password-0815"


@pytest.mark.asyncio
async def test_a_group_consumes_exactly_once_over_sasl_ssl_scram(
    sasl_cluster: LocalCluster, sasl_producer: AIOKafkaProducer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(1)  # everything: aiokafka's and kazoo's debug output included
    options = sasl_cluster.kafka_options
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    password = options["sasl_plain_password"]
    topic = await topic_on(sasl_cluster, 4)
    group = fresh("sasl-group")

    members = [sasl_member(sasl_cluster, group, topic) for _ in range(2)]
    shown = [repr(options), str(options), *(repr(m) for m in members)]
    shown += [repr(vars(m)) for m in members]

    async def look() -> None:
        shown.extend([repr(await m.statistics()) for m in members])
        shown.extend(repr(m) for m in members)

    await consume_exactly_once(members, numbered_by(sasl_producer, topic), 400, joined=look)
    assert len(shown) == 10

    assert "Authenticated as aio-cluster via SCRAM-SHA-512" in caplog.text, "nothing captured"
    for secret in (password, ZK_PASSWORD):
        assert secret not in caplog.text
        assert all(secret not in text for text in shown)


@pytest.mark.asyncio
async def test_a_wrong_password_is_one_typed_error_naming_server_and_user(
    sasl_cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(1)
    topic = await topic_on(sasl_cluster, 1)
    options = KafkaOptions({**sasl_cluster.kafka_options, "sasl_plain_password": WRONG_PASSWORD})
    group = sasl_member(sasl_cluster, "wrong-password", topic, kafka_options=options)
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
    topic = await topic_on(sasl_cluster, 1)
    options = KafkaOptions(
        security_protocol="SSL", ssl_context=sasl_cluster.kafka_options["ssl_context"]
    )
    group = sasl_member(sasl_cluster, "no-sasl", topic, kafka_options=options)
    with pytest.raises(AuthenticationError, match="without SASL") as raised:
        await asyncio.wait_for(group.register(), CONNECT_BOUND)
    assert sasl_cluster.bootstrap in str(raised.value)


async def _refused(consumer: AIOKafkaConsumer) -> bool:
    """Whether a fetch of the consumer's partitions is refused as unauthorized."""
    try:
        await consumer.getmany(timeout_ms=500)
    except TopicAuthorizationFailedError:
        return True
    return False


@pytest.mark.asyncio
async def test_a_user_without_a_read_acl_is_refused_until_granted_through_kafka_proxies(
    sasl_cluster: LocalCluster, sasl_producer: AIOKafkaProducer
) -> None:
    topic = await topic_on(sasl_cluster, 1)
    await sasl_producer.send_and_wait(topic, b"first", partition=0)
    user = fresh("reader")
    options = await sasl_cluster.add_user(user)
    assert options["sasl_plain_username"] == user
    await sasl_cluster.grant(user, "Describe", topic=topic)  # it sees the topic, cannot read it
    got: list[bytes] = []

    async def read() -> bool:
        try:
            batches = await consumer.getmany(timeout_ms=500)
        except TopicAuthorizationFailedError:  # the brokers have not applied the grant yet
            return False
        got.extend(record.value or b"" for records in batches.values() for record in records)
        return bool(got)

    async with sasl_cluster.kafka_proxies() as proxies:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=proxies.bootstrap, auto_offset_reset="earliest", **options
        )
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, 0)])
            await wait_until(lambda: _refused(consumer), what="Kafka refused the read")
            await sasl_cluster.grant(user, "Read", topic=topic)
            await wait_until(read, what="a read once granted")
            assert got == [b"first"]
            assert proxies[0].forwarded > 0, "the SASL_SSL traffic passed the proxy"
            await sasl_cluster.revoke(user, "Read", topic=topic)
            await sasl_producer.send_and_wait(topic, b"second", partition=0)
            await wait_until(lambda: _refused(consumer), what="refused again once revoked")
            assert got == [b"first"]
        finally:
            await consumer.stop()


@pytest.mark.asyncio
async def test_a_transactional_producer_needs_its_transactional_id_granted(
    sasl_cluster: LocalCluster,
) -> None:
    topic = await topic_on(sasl_cluster, 1)
    user = fresh("writer")
    options = await sasl_cluster.add_user(user)
    prefix = fresh("tx")
    await sasl_cluster.grant(user, "Read", "Write", topic=topic)  # read: its offsets' commit
    await sasl_cluster.grant(user, "Describe", cluster=True)

    def producer() -> AIOKafkaProducer:
        return AIOKafkaProducer(
            bootstrap_servers=sasl_cluster.bootstrap, transactional_id=f"{prefix}.0", **options
        )

    refused = producer()
    with pytest.raises(TransactionalIdAuthorizationFailed):
        await refused.start()
    await refused.stop()
    await sasl_cluster.grant(
        user, "Write", "Describe", transactional_id=f"{prefix}.", prefixed=True
    )
    allowed = producer()

    async def started() -> bool:
        try:
            await allowed.start()
        except TransactionalIdAuthorizationFailed:
            return False
        return True

    await wait_until(started, what="the producer started once granted")
    group = fresh("tx-group")
    await sasl_cluster.grant(user, "Read", "Describe", group=group)  # its offsets' group
    try:
        async with allowed.transaction():
            await allowed.send_and_wait(topic, b"once", partition=0)
            await allowed.send_offsets_to_transaction({TopicPartition(topic, 0): 1}, group)
    finally:
        await allowed.stop()


@pytest.mark.asyncio
async def test_grants_name_an_operation_and_a_resource(sasl_cluster: LocalCluster) -> None:
    with pytest.raises(ConfigurationError, match="operation"):
        await sasl_cluster.grant("reader", topic="t")
    with pytest.raises(ConfigurationError, match="resource"):
        await sasl_cluster.grant("reader", "Read")
    with pytest.raises(ConfigurationError, match="Reed"):
        await sasl_cluster.grant("reader", "Reed", topic="t")
    with pytest.raises(ConfigurationError, match=r"a cluster has no ACL operations \['Read'\]"):
        await sasl_cluster.grant("reader", "Read", "Describe", cluster=True)
    with pytest.raises(ConfigurationError, match="a group has no ACL operations"):
        await sasl_cluster.grant("reader", "Read", "Write", topic="t", group="g")
    with pytest.raises(ConfigurationError, match="password"):
        await sasl_cluster.add_user("reader", "has,comma")


@pytest.mark.asyncio
async def test_a_member_of_a_second_user_needs_only_read_on_the_topic(
    sasl_cluster: LocalCluster, sasl_producer: AIOKafkaProducer
) -> None:
    """A member at least once keeps its offsets in ZooKeeper: Read on the topic is all it needs
    of Kafka (taking that away is what refuses its reads)."""
    topic = await topic_on(sasl_cluster, 2)
    user = fresh("member")
    options = await sasl_cluster.add_user(user)
    await sasl_cluster.grant(user, "Read", topic=topic)
    group = fresh("acl-group")
    members = [sasl_member(sasl_cluster, group, topic, kafka_options=options) for _ in range(2)]
    await consume_exactly_once(members, numbered_by(sasl_producer, topic), 100)
