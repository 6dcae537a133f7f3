"""A pytest plugin for users' integration suites: a real cluster, fresh topics, acknowledged sends.

Opt in with ``pytest -p aio_cluster.testing`` on the command line, or in a ``conftest.py``::

    pytest_plugins = ["aio_cluster.testing"]

Fixtures (pytest-asyncio, strict or auto mode):

- ``local_cluster`` (session scope): a running [LocalCluster][aio_cluster.local.LocalCluster]: the
  cluster that ``AIO_CLUSTER_BOOTSTRAP`` and ``AIO_CLUSTER_ZOOKEEPER`` name, else one started
  with Java, else with Docker. It is started in the session's event loop, so tests that use it
  run in that loop: mark them ``@pytest.mark.asyncio(loop_scope="session")``.
- ``new_topic``: ``await new_topic(partitions=3)`` creates a topic of a fresh name and returns it.
- ``produce``: ``await produce(topic, values, keys=None)`` sends the values (``str`` or
  ``bytes``) and returns once the broker acknowledged every one, with the ``(partition,
  offset)`` of each, in order.
- ``fault_proxy``: ``await fault_proxy(local_cluster.zookeeper)`` starts a
  [FaultProxy][aio_cluster.local.FaultProxy] to that server (stopped after the test): give one
  member its ``address`` and ``drop()``, ``delay()`` or ``cut()`` its traffic to test a service
  against a network partition.
- ``kafka_fault_proxies``: ``proxies = await kafka_fault_proxies()`` puts a
  [FaultProxy][aio_cluster.local.FaultProxy] in front of every broker of ``local_cluster``
  ([KafkaProxies][aio_cluster.local.KafkaProxies], stopped after the test): give one member
  ``proxies.bootstrap`` and ``proxies.drop()`` cuts it off from all of Kafka (``proxies[i]``
  from broker ``i``), not from ZooKeeper. It needs a cluster the session started with Java.

The factories open their Kafka clients per call, in the caller's event loop, so they work in any
loop scope.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from .errors import ConfigurationError
from .local import FaultProxy, KafkaProxies, LocalCluster

__all__ = [
    "FaultProxyFactory",
    "KafkaFaultProxiesFactory",
    "NewTopicFactory",
    "ProduceFunction",
    "fault_proxy",
    "kafka_fault_proxies",
    "local_cluster",
    "new_topic",
    "produce",
]

NewTopicFactory = Callable[..., Awaitable[str]]
"""``await new_topic(partitions=1, *, prefix="topic") -> str``."""
ProduceFunction = Callable[..., Awaitable[list[tuple[int, int]]]]
"""``await produce(topic, values, keys=None) -> [(partition, offset), ...]``."""
FaultProxyFactory = Callable[[str], Awaitable[FaultProxy]]
"""``await fault_proxy("host:port") -> FaultProxy``, started."""
KafkaFaultProxiesFactory = Callable[[], Awaitable[KafkaProxies]]
"""``await kafka_fault_proxies() -> KafkaProxies``, started."""

Value = str | bytes


def _encode(value: Value | None) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    raise ConfigurationError(f"values and keys must be str or bytes, not {value!r}")


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def local_cluster() -> AsyncIterator[LocalCluster]:
    """The session's ZooKeeper + Kafka: started once, stopped at the end whatever happens; one
    started here has the listeners of `kafka_fault_proxies` (one member at a time)."""
    async with LocalCluster(kafka_proxies=1) as cluster:
        yield cluster


@pytest.fixture
def new_topic(local_cluster: LocalCluster) -> NewTopicFactory:
    """An async factory of fresh topics: ``await new_topic(partitions=3)`` returns the name."""

    async def create(partitions: int = 1, *, prefix: str = "topic") -> str:
        given: object = partitions
        if isinstance(given, bool) or not isinstance(given, int) or given < 1:
            raise ConfigurationError(f"partitions must be a positive integer, not {partitions!r}")
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        admin = AIOKafkaAdminClient(bootstrap_servers=local_cluster.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(name, partitions, 1)])
        finally:
            await admin.close()
        return name

    return create


@pytest.fixture
def produce(local_cluster: LocalCluster) -> ProduceFunction:
    """Send values to a topic; returns once the broker acknowledged all of them.

    ``await produce(topic, ["a", "b"], keys=["k1", "k2"])`` returns ``[(partition, offset),
    ...]`` in the order of ``values``. Without keys the producer spreads the values over the
    partitions.
    """

    async def send(
        topic: str, values: Sequence[Value], keys: Sequence[Value | None] | None = None
    ) -> list[tuple[int, int]]:
        if keys is not None and len(keys) != len(values):
            raise ConfigurationError(
                f"keys must be as many as values: {len(keys)} keys, {len(values)} values"
            )
        pairs = [(_encode(v), _encode(keys[i] if keys else None)) for i, v in enumerate(values)]
        producer = AIOKafkaProducer(bootstrap_servers=local_cluster.bootstrap, acks="all")
        await producer.start()
        try:
            futures = [await producer.send(topic, value=v, key=k) for v, k in pairs]
            return [((m := await f).partition, m.offset) for f in futures]
        finally:
            await producer.stop()

    return send


@pytest_asyncio.fixture
async def fault_proxy() -> AsyncIterator[FaultProxyFactory]:
    """Start FaultProxies to servers, in the test's event loop; all stopped after the test."""
    started: list[FaultProxy] = []

    async def start(target: str) -> FaultProxy:
        proxy = FaultProxy(target)
        await proxy.start()
        started.append(proxy)
        return proxy

    try:
        yield start
    finally:
        for proxy in started:
            await proxy.stop()


@pytest_asyncio.fixture
async def kafka_fault_proxies(
    local_cluster: LocalCluster,
) -> AsyncIterator[KafkaFaultProxiesFactory]:
    """Start proxies in front of every broker, in the test's event loop, for one member's Kafka
    traffic; stopped after the test. A call raises ``LocalClusterError`` when the session's
    cluster has no proxied listeners (it came from the environment or Docker) or its proxies are
    in use already.
    """
    async with contextlib.AsyncExitStack() as stack:

        async def start() -> KafkaProxies:
            return await stack.enter_async_context(local_cluster.kafka_proxies())

        yield start
