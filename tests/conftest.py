"""Shared fixtures: one real local cluster per test session, a fresh topic and group per test, a
jar cache of a test's own; the secured clusters' fixtures come from the ``secured`` plugin.

The tests run in parallel (pytest-xdist, ``nox -s tests``) on one shared cluster, the `cluster`
fixture: the one ``AIO_CLUSTER_BOOTSTRAP`` and ``AIO_CLUSTER_ZOOKEEPER`` name, which a parallel
run starts for all its workers (`shared_cluster` does). A test that stops, restarts or kills
servers, or needs a special cluster (TLS, SASL, several nodes), uses a cluster of its own instead
(`OWN_CLUSTERS`); such tests are marked ``own_cluster`` here (a test that starts servers by other
means is marked so by hand). A test that uses no cluster at all is marked ``server_free``:
``nox -s tests_compat`` runs those on the other Pythons.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from hypothesis import settings

from aio_cluster.local import LocalCluster, jars
from aio_cluster.zookeeper.client import ZooKeeper

import shared_cluster
from support import add_topic, fresh, producer_of

pytest_plugins = ["secured"]

# Tests assert outcomes, not durations: hypothesis's default deadline (200 ms a case) failed a
# pure assignment property in CI when parallel workers shared the cores (one case took 389 ms).
settings.register_profile("aio_cluster", deadline=None)
settings.register_profile("compat", deadline=None, max_examples=10)
"""``--hypothesis-profile compat``: the other claimed Pythons (``nox -s tests_compat``, ``deps``)
check that the properties run there, with a tenth of the cases; the whole search runs once, on
the default Python (``nox -s tests``)."""
settings.load_profile("aio_cluster")

MakeTopic = Callable[..., Awaitable[str]]
Produce = Callable[..., Awaitable[Counter[int]]]


OWN_CLUSTERS = (
    *("restartable", "multi_cluster", "tls_cluster", "sasl_cluster", "own_cache"),
    *("proxied_cluster", "proxied_brokers"),
)
"""The fixtures that give a test servers of its own: clusters whose servers the tests stop and
start, or special ones, and the cache of ``python -m aio_cluster.local up`` (which starts a
cluster). A parallel run (``--dist loadgroup``) sends the tests of one module to one worker, so
that a module's cluster starts once and its tests use it one at a time, and every test of
`SHARED_BY_MODULES`' clusters to one worker too (`pytest_collection_modifyitems`)."""

SHARED_BY_MODULES = ("tls_cluster", "sasl_cluster")
"""The own clusters of the session that tests of several modules use (tests/secured.py): each
starts once, on the worker that runs all of them."""

RESTARTED = ("restartable", "multi_cluster")
"""The fixtures whose servers the tests stop and start again: such a test waits for a JVM to
restart within a session's time, which a machine whose cores the parallel workers share did not
always give it, so it is marked ``faults``: those run in a pytest of their own beside the
others, two at a time."""


_SHARED = pytest.StashKey[shared_cluster.SharedCluster]()


def pytest_configure(config: pytest.Config) -> None:
    """In the controller of a parallel run (``pytest -n N``) not pointed at a cluster: start the
    cluster its workers share, and name it in the environment they inherit."""
    if shared_cluster.wanted(config):
        started = shared_cluster.SharedCluster.start()
        config.stash[_SHARED] = started
        os.environ.update(started.variables)


def pytest_unconfigure(config: pytest.Config) -> None:
    started = config.stash.get(_SHARED, None)
    if started is not None:
        for name in started.variables:
            os.environ.pop(name, None)
        started.stop()


@pytest.hookimpl(tryfirst=True)  # before -m deselects by these marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by the servers it needs: ``own_cluster`` for those of `OWN_CLUSTERS`
    (and ``faults`` for those of `RESTARTED`), ``server_free`` for those that use no cluster
    fixture; and with the worker group of a parallel run (``xdist_group``): the secured
    clusters' for the tests of `SHARED_BY_MODULES`, else its module's."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())  # every fixture it uses, directly or not
        shared = [name for name in SHARED_BY_MODULES if name in fixtures]
        group = "secured" if shared else item.nodeid.partition("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))
        if any(name in fixtures for name in OWN_CLUSTERS):
            item.add_marker(pytest.mark.own_cluster)
        if any(name in fixtures for name in RESTARTED):
            item.add_marker(pytest.mark.faults)
        elif item.get_closest_marker("own_cluster") is None and "cluster" not in fixtures:
            item.add_marker(pytest.mark.server_free)


@pytest_asyncio.fixture(scope="session")
async def session_loop() -> asyncio.AbstractEventLoop:
    """The loop the async tests and the session's fixtures run on."""
    return asyncio.get_running_loop()


@pytest.fixture(autouse=True)
def tasks_shown_before_the_timeout(request: pytest.FixtureRequest) -> Iterator[None]:
    """Ten seconds before pytest-timeout fails an async test, print the stack of every task of
    its loop: what a rare hang waits on, which the timeout's own dump (threads only) cannot show.
    The stacks are read from a timer thread, so that a blocked loop shows them too."""
    if request.node.get_closest_marker("asyncio") is None:
        yield
        return
    loop: asyncio.AbstractEventLoop = request.getfixturevalue("session_loop")
    marker = request.node.get_closest_marker("timeout")
    timeout = float(marker.args[0] if marker and marker.args else request.config.getini("timeout"))
    timer = threading.Timer(max(timeout - 10, 1), _show_tasks, (loop, request.node.nodeid))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _show_tasks(loop: asyncio.AbstractEventLoop, test: str) -> None:
    print(f"--- {test}: about to time out; the loop's tasks:", file=sys.stderr)
    for task in asyncio.all_tasks(loop):
        task.print_stack(limit=12, file=sys.stderr)


@pytest_asyncio.fixture(scope="session")
async def cluster() -> AsyncIterator[LocalCluster]:
    """The session's ZooKeeper + Kafka: the shared one the environment names (in a parallel run),
    else started once, stopped at the end whatever happens. Never stop or restart its servers:
    other tests use them at the same time; take `restartable` for that."""
    async with LocalCluster() as started:
        yield started


@pytest_asyncio.fixture(scope="session")
async def restartable() -> AsyncIterator[LocalCluster]:
    """A single-node cluster of the session's own, for the tests that stop and start its servers
    (never the environment's, nor the shared `cluster`, which other tests use meanwhile): started
    on first use, with Java (a Docker one cannot be restarted)."""
    async with LocalCluster(use_env=False) as started:
        if started.mode != "java":
            pytest.skip("stopping and starting servers needs a Java-started cluster")
        yield started


@pytest_asyncio.fixture(scope="session")
async def multi_cluster() -> AsyncIterator[LocalCluster]:
    """A 3-node ZooKeeper ensemble and 3 Kafka nodes of the session's own, for the tests of node
    faults: started on first use only (it costs more than the single-node one), and never the
    environment's cluster, since the tests stop and start its nodes."""
    async with LocalCluster(brokers=3, zookeepers=3, use_env=False) as started:
        yield started


@pytest_asyncio.fixture(scope="session")
async def admin(cluster: LocalCluster) -> AsyncIterator[AIOKafkaAdminClient]:
    client = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    await client.start()
    yield client
    await client.close()


@pytest_asyncio.fixture(scope="session")
async def producer(cluster: LocalCluster) -> AsyncIterator[AIOKafkaProducer]:
    async with producer_of(cluster) as started:
        yield started


@pytest.fixture
def make_topic(admin: AIOKafkaAdminClient) -> MakeTopic:
    """Create a fresh topic: ``await make_topic(partitions=2)`` returns its name."""

    async def make(partitions: int = 2) -> str:
        return await add_topic(admin, partitions)

    return make


@pytest.fixture
def group_name() -> str:
    """A fresh consumer group name."""
    return fresh("group")


@pytest.fixture
def produce(producer: AIOKafkaProducer) -> Produce:
    """Produce ``count`` keyed, sequence-numbered messages (key ``k<i>``, value ``<i>``, starting
    at ``start``) spread over the topic's partitions; returns how many went to each partition."""

    async def send(topic: str, count: int, *, start: int = 0) -> Counter[int]:
        futures = [
            await producer.send(topic, key=f"k{i}".encode(), value=str(i).encode())
            for i in range(start, start + count)
        ]
        counts: Counter[int] = Counter()
        for future in futures:
            counts[(await future).partition] += 1
        return counts

    return send


@pytest_asyncio.fixture
async def zk(cluster: LocalCluster) -> AsyncIterator[ZooKeeper]:
    """A ZooKeeper client of the test's own, to look at the nodes the library wrote."""
    client = ZooKeeper(cluster.zookeeper, session_timeout=10.0)
    await client.start()
    yield client
    await client.close()


@pytest.fixture
def own_cache(tmp_path: Path) -> Path:
    """A cache of the test's own for ``up`` and ``down``, so that their state file is not that of
    a developer's running ``up``; the jars fetched already are linked, not fetched again."""
    own = tmp_path / "cache"
    own.mkdir()
    shared = jars.default_cache_dir()
    if shared.is_dir():
        for entry in shared.iterdir():
            if entry.name != "run":
                (own / entry.name).symlink_to(entry)
    return own
