"""FaultProxy: what it does to a connection, against an echo server of the test's own, and what
a ZooKeeper client behind it sees, against the real server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import anyio
import pytest
import pytest_asyncio

from aio_cluster import ConfigurationError, CoordinationError
from aio_cluster.local import FaultProxy, LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.values import SessionState

from support import wait_until

pytestmark = pytest.mark.asyncio


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


@pytest_asyncio.fixture
async def echo() -> AsyncIterator[str]:
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"127.0.0.1:{port}"


async def _connect(proxy: FaultProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, _, port = proxy.address.rpartition(":")
    return await asyncio.open_connection(host, int(port))


async def _round_trip(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes, timeout: float = 2.0
) -> bytes:
    writer.write(data)
    await writer.drain()
    return await asyncio.wait_for(reader.readexactly(len(data)), timeout)


async def test_forwards_both_ways_and_counts(echo: str) -> None:
    async with FaultProxy(echo) as proxy:
        reader, writer = await _connect(proxy)
        assert await _round_trip(reader, writer, b"hello") == b"hello"
        assert proxy.forwarded == 10
        assert proxy.connections == 1
        writer.close()
        await wait_until(lambda: proxy.connections == 0, what="the link closed with its client")


async def test_drop_swallows_and_healing_resets_the_broken_connection(echo: str) -> None:
    async with FaultProxy(echo) as proxy:
        reader, writer = await _connect(proxy)
        assert await _round_trip(reader, writer, b"one") == b"one"
        proxy.drop()
        with pytest.raises(asyncio.TimeoutError):
            await _round_trip(reader, writer, b"lost", timeout=0.5)
        assert proxy.dropped == 4
        proxy.forward()
        assert await asyncio.wait_for(reader.read(), 5.0) == b"", "the broken stream is closed"
        writer.close()
        again, writer = await _connect(proxy)
        assert await _round_trip(again, writer, b"two") == b"two", "new connections pass"
        writer.close()


async def test_delay_keeps_the_order(echo: str) -> None:
    async with FaultProxy(echo) as proxy:
        reader, writer = await _connect(proxy)
        proxy.delay(0.3)
        loop = asyncio.get_running_loop()
        sent = loop.time()
        for chunk in (b"a", b"b", b"c"):
            writer.write(chunk)
        await writer.drain()
        assert await asyncio.wait_for(reader.readexactly(3), 5.0) == b"abc"
        # Both ways are delayed; the test only asserts that the answer was held back at all.
        assert loop.time() - sent >= 0.3
        writer.close()
    with pytest.raises(ConfigurationError, match="delay"):
        FaultProxy(echo).delay(-1)


async def test_cut_closes_and_refuses_until_forward(echo: str) -> None:
    async with FaultProxy(echo) as proxy:
        reader, writer = await _connect(proxy)
        proxy.cut()
        assert await asyncio.wait_for(reader.read(), 5.0) == b""
        writer.close()
        refused, writer = await _connect(proxy)
        assert await asyncio.wait_for(refused.read(), 5.0) == b"", "a new one is closed at once"
        writer.close()
        proxy.forward()
        reader, writer = await _connect(proxy)
        assert await _round_trip(reader, writer, b"back") == b"back"
        writer.close()


async def test_the_target_must_be_one_address() -> None:
    with pytest.raises(ConfigurationError, match="host:port"):
        FaultProxy("nowhere")
    with pytest.raises(ConfigurationError, match="one host:port"):
        FaultProxy("a:1,b:2")


async def test_a_zookeeper_client_behind_a_drop_falls_silent_and_comes_back(
    cluster: LocalCluster,
) -> None:
    async with FaultProxy(cluster.zookeeper) as proxy:
        zk = ZooKeeper(proxy.address, session_timeout=6.0)
        await zk.start()
        try:
            await zk.ping()
            heard = zk.heard_at
            proxy.drop()
            with pytest.raises((asyncio.TimeoutError, CoordinationError)):
                await asyncio.wait_for(zk.ping(), 1.0)
            assert zk.heard_at == heard, "nothing answered meanwhile"
            await wait_until(
                lambda: zk.state is not SessionState.CONNECTED, what="the client saw the cut"
            )
            proxy.forward()
            await wait_until(
                lambda: zk.state is SessionState.CONNECTED, what="the client reconnected"
            )
            await zk.ping()
            assert zk.heard_at > heard
            assert zk.negotiated_timeout == pytest.approx(6.0)
        finally:
            await zk.close()


async def test_stop_waits_for_the_proxy_then_raises_the_callers_cancellation(echo: str) -> None:
    """A caller cancelled while it stops the proxy is cancelled still (its scope catches its
    own cancellation, nothing after ``stop()`` runs), once the proxy stopped."""
    proxy = FaultProxy(echo)
    await proxy.start()
    runner = proxy._runner
    assert runner is not None
    went_on = False
    with anyio.CancelScope() as scope:
        scope.cancel()
        await proxy.stop()
        went_on = True
    assert scope.cancelled_caught
    assert not went_on, "stop() swallowed the caller's cancellation"
    assert runner.done(), "the proxy stopped first"
