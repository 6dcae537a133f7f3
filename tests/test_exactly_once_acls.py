"""Exactly once under Kafka's ACLs (the SASL cluster's StandardAuthorizer): a principal not
granted the partitions' transactional ids, or the group, gets a typed refusal naming what to
grant, not a fencing retried for ever."""

from __future__ import annotations

import pytest

from aio_cluster import ConsumerGroup, TransactionDeniedError
from aio_cluster.local import LocalCluster

from secured import sasl_member, topic_on
from support import fresh, within

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
