"""Exactly once refused by Kafka's ACLs in the member's periodic offset store (its background,
not the handlers' commits), against the real servers: the application gets the documented
`TransactionDeniedError` itself, not an `AioClusterError` wrapping an ``ExceptionGroup``. The
refusal is Kafka's answer to the offsets a transaction sends (``GROUP_AUTHORIZATION_FAILED``),
injected; the ACLs that cause it: ``tests/test_exactly_once_acls.py``."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import GroupAuthorizationFailedError

from aio_cluster import Output, Record, TransactionDeniedError
from aio_cluster.local import LocalCluster

from conftest import MakeTopic, Produce
from support import member, within

pytestmark = [pytest.mark.asyncio]


async def test_a_denial_met_by_the_periodic_store_is_raised_as_itself(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source, sink = await make_topic(2), await make_topic(1)
    await produce(source, 10)

    async def denied(self: AIOKafkaProducer, *args: Any, **kwargs: Any) -> None:
        raise GroupAuthorizationFailedError("injected: the group is not granted")

    monkeypatch.setattr(AIOKafkaProducer, "send_offsets_to_transaction", denied)

    async def handler(record: Record, output: Output) -> None:
        await output.send(sink, record.value, key=record.key)

    async with member(cluster, group_name, source, exactly_once=True) as group:
        # The handlers' own commits wait: the member's store loop (every second) meets it first.
        with pytest.raises(TransactionDeniedError):
            await within(
                group.process_transactional(handler, commit_interval=30),
                60,
                "process_transactional()'s end",
            )
