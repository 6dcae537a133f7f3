"""The fixtures of the secured clusters, a plugin of ``conftest.py``: a cluster serving Kafka (and
ZooKeeper) over TLS only, one with SASL_SSL and SCRAM-SHA-512, and a producer for each. Each
cluster serves the session, started on first use (each costs a cluster start); conftest sends
every test that uses one to the same worker of a parallel run, so that each starts once. The
tests on them keep to users, topics and groups of their own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from aiokafka import AIOKafkaProducer

from aio_cluster import ConsumerGroup
from aio_cluster.local import LocalCluster

from support import create_topic, member, producer_of

ZK_PASSWORD = "zk-Secret-4711"
"""The ZooKeeper digest password of `sasl_member`."""


@pytest_asyncio.fixture(scope="session")
async def tls_cluster() -> AsyncIterator[LocalCluster]:
    """With one set of Kafka proxies, to show they pass TLS; its ZooKeeper serves TLS too
    (``zookeeper_secure``)."""
    async with LocalCluster(tls=True, kafka_proxies=1) as started:
        yield started


@pytest_asyncio.fixture(scope="session")
async def sasl_cluster() -> AsyncIterator[LocalCluster]:
    """With one set of Kafka proxies, to show they pass SASL over TLS."""
    async with LocalCluster(sasl=True, kafka_proxies=1) as started:
        yield started


@pytest_asyncio.fixture(scope="session")
async def tls_producer(tls_cluster: LocalCluster) -> AsyncIterator[AIOKafkaProducer]:
    async with producer_of(tls_cluster) as started:
        yield started


@pytest_asyncio.fixture(scope="session")
async def sasl_producer(sasl_cluster: LocalCluster) -> AsyncIterator[AIOKafkaProducer]:
    async with producer_of(sasl_cluster) as started:
        yield started


def sasl_member(cluster: LocalCluster, group: str, topic: str, **options: Any) -> ConsumerGroup:
    """A `member` with ZooKeeper digest credentials, whose nodes get the creator ACL."""
    options.setdefault("zookeeper_auth", [("digest", f"member:{ZK_PASSWORD}")])
    options.setdefault("zookeeper_acl", "creator")
    return member(cluster, group, topic, **options)


async def topic_on(cluster: LocalCluster, partitions: int) -> str:
    """A fresh topic on a secured ``cluster``, created over its security options."""
    return await create_topic(
        cluster.bootstrap, partitions, prefix="secured", kafka_options=cluster.kafka_options
    )
