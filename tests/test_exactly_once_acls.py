"""Exactly once under Kafka's ACLs (the SASL cluster's StandardAuthorizer): a principal not
granted the partitions' transactional ids, or the group, gets a typed refusal naming what to
grant, not a fencing retried for ever; with several partitions due at once, one refusal still
comes out as itself."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import GroupAuthorizationFailedError

from aio_cluster import ConsumerGroup, Output, Record, TransactionDeniedError
from aio_cluster.local import LocalCluster

from conftest import Produce
from secured import sasl_member, topic_on
from support import add_topic, fresh, member, within

pytestmark = [pytest.mark.asyncio]


async def drain(group: ConsumerGroup[int], sink: str) -> None:
    async for _partition, batch, output in group.transactions():
        for record in batch:
            await output.send(sink, record.value, key=record.key)


@pytest.mark.parametrize("missing", ["transactional_id", "group"])
async def test_a_missing_grant_is_a_typed_refusal(missing: str, sasl_cluster: LocalCluster) -> None:
    source, sink = await topic_on(sasl_cluster, 1), await topic_on(sasl_cluster, 1)
    user = fresh("eo")
    options = await sasl_cluster.add_user(user)
    group = fresh("eo-group")
    await sasl_cluster.grant(user, "Read", "Describe", topic=source)
    await sasl_cluster.grant(user, "Write", "Describe", topic=sink)
    await sasl_cluster.grant(user, "Describe", cluster=True)
    if missing != "transactional_id":
        await sasl_cluster.grant(
            user, "Write", "Describe", transactional_id=f"aio-cluster.{group}.", prefixed=True
        )
    if missing != "group":
        await sasl_cluster.grant(user, "Read", "Describe", group=group)
    with pytest.raises(TransactionDeniedError, match=missing.replace("_", " ")):
        async with sasl_member(
            sasl_cluster, group, source, exactly_once=True, kafka_options=options
        ) as member:
            await within(drain(member, sink), 30, "the refusal")


async def test_a_refusal_of_several_partitions_commits_is_raised_as_itself(
    cluster: LocalCluster,
    admin: AIOKafkaAdminClient,
    produce: Produce,
    group_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kafka refuses the group in the commits of two partitions due at once (aiokafka patched to
    answer as the ACLs would: the shared cluster has none): ``process_transactional()`` raises
    the `TransactionDeniedError`, not an ``ExceptionGroup`` of them."""
    source = await add_topic(admin, 2, prefix="input")
    sink = await add_topic(admin, 2, prefix="output")
    await produce(source, 20)

    async def refused(*_args: Any, **_kwargs: Any) -> None:
        raise GroupAuthorizationFailedError()

    monkeypatch.setattr(AIOKafkaProducer, "send_offsets_to_transaction", refused)

    async def handler(record: Record, output: Output) -> None:
        await output.send(sink, record.value, key=record.key)

    with pytest.raises(TransactionDeniedError, match="group"):
        async with member(cluster, group_name, source, exactly_once=True) as group:
            await within(
                group.process_transactional(handler, commit_interval=0.5), 60, "the refusal"
            )
