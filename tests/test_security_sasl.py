"""A fully secured group against a real local cluster: Kafka over SASL_SSL with SCRAM-SHA-512,
ZooKeeper with digest credentials and the creator ACL. It consumes exactly once; a wrong password
is one typed error naming the server and the user; no secret shows in logs, reprs or errors."""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiokafka import AIOKafkaProducer

from aio_cluster import AuthenticationError, GroupState, KafkaOptions
from aio_cluster.local import LocalCluster

from secured import ZK_PASSWORD, sasl_member, topic_on
from support import consume_exactly_once, fresh, numbered_by

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
