"""FaultProxy: a TCP proxy that stands between clients and one server, to test a service against
the network faults a cluster meets: traffic dropped (a partition), delayed, or cut.

::

    async with FaultProxy(cluster.zookeeper) as proxy:
        group = ConsumerGroup(name, [cluster.bootstrap], [proxy.address], topic)
        ...
        proxy.drop()       # bytes are swallowed both ways; connections stay open, as in a
                           # network partition: the client learns of it only by its timeouts
        proxy.forward()    # healed: a connection that lost bytes is reset (its stream is broken),
                           # as a real one would be by the peer's timeout; new ones pass
        proxy.delay(0.5)   # every chunk arrives half a second late, in order
        proxy.cut()        # every connection is closed, new ones are refused until forward()

Only the clients given `address` go through it: point one member at it, and the others straight
at the server, to cut that member alone. It runs in the event loop of whoever started it.

A Kafka client learns every broker's address from the metadata, so one proxy in front of the
bootstrap would see its first request only. `KafkaProxies` is one `FaultProxy` per broker, each in
front of a listener of that broker which advertises the proxy's address: a client bootstrapped at
`KafkaProxies.bootstrap` sends all its Kafka traffic through them (see
`LocalCluster.kafka_proxies()`)::

    async with cluster.kafka_proxies() as proxies:
        group = ConsumerGroup(name, proxies.bootstrap, cluster.zookeeper, topic)
        ...
        proxies.drop()      # the member reaches no broker; ZooKeeper as before
        proxies[1].drop()   # or only broker 1: the partitions it leads stall
        proxies.forward()
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskGroup

from ..concurrency import background
from ..errors import ConfigurationError
from ..net.addresses import parse_servers

__all__ = ["FaultProxy", "KafkaProxies", "ProxyMode"]

log = logging.getLogger(__name__)

_CHUNK = 65536


class ProxyMode(enum.Enum):
    """What a `FaultProxy` does with the traffic."""

    FORWARD = "forward"
    DROP = "drop"
    CUT = "cut"


@dataclass(eq=False)
class _Link:
    """One client connection and its connection to the server."""

    client: SocketStream
    server: SocketStream
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    lossy: bool = False
    """True once a byte of it was dropped: its streams no longer line up."""


class FaultProxy:
    """A TCP proxy to one server whose traffic can be dropped, delayed or cut (see the
    module)."""

    def __init__(self, target: str, *, host: str = "127.0.0.1", port: int = 0) -> None:
        """Args:
        target: ``host:port`` of the server.
        host: the address to listen on.
        port: the port to listen on (0: a free one; see `address`).

        Raises:
            ConfigurationError: ``target`` is not ``host:port``.
        """
        addresses = parse_servers(target, "the proxied")
        if len(addresses) != 1:
            raise ConfigurationError(f"target must be one host:port, not {target!r}")
        target_host, _, target_port = addresses[0].rpartition(":")
        self._target = (target_host.strip("[]"), int(target_port))
        self._host = host
        self._port = port
        self._mode = ProxyMode.FORWARD
        self._delay = 0.0
        self._links: set[_Link] = set()
        self._runner: asyncio.Task[None] | None = None
        self._listening: asyncio.Future[int] | None = None
        self.forwarded = 0
        """Bytes passed on, both ways."""
        self.dropped = 0
        """Bytes swallowed, both ways."""

    @property
    def address(self) -> str:
        """``host:port`` for the clients (once started)."""
        if self._listening is None or not self._listening.done():
            raise RuntimeError("the proxy is not started")
        return f"{self._host}:{self._listening.result()}"

    @property
    def mode(self) -> ProxyMode:
        return self._mode

    @property
    def connections(self) -> int:
        """Client connections open now."""
        return len(self._links)

    def forward(self) -> None:
        """Pass the traffic on again (the default). A connection that lost bytes while dropping
        is closed: the client connects anew."""
        self._mode = ProxyMode.FORWARD
        self._delay = 0.0
        for link in list(self._links):
            if link.lossy:
                link.scope.cancel()

    def drop(self) -> None:
        """Swallow all traffic, both ways, keeping the connections open: a network partition."""
        self._mode = ProxyMode.DROP

    def delay(self, seconds: float) -> None:
        """Pass every chunk on ``seconds`` late, in order (forwarding otherwise)."""
        if isinstance(seconds, bool) or not seconds >= 0:
            raise ConfigurationError(f"delay must be a non-negative number, not {seconds!r}")
        self.forward()
        self._delay = float(seconds)

    def cut(self) -> None:
        """Close every connection, and each new one at once, until `forward()`."""
        self._mode = ProxyMode.CUT
        for link in list(self._links):
            link.scope.cancel()

    async def start(self) -> None:
        """Listen (in a task of the running loop) until `stop()`."""
        if self._runner is not None:
            raise RuntimeError("the proxy is started already")
        self._listening = asyncio.get_running_loop().create_future()
        self._runner = background(self._serve(), name=f"fault proxy to {self._target}")
        try:
            await self._listening
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Close every connection and stop listening."""
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runner

    async def __aenter__(self) -> FaultProxy:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def _refusing(self) -> bool:
        return self._mode is ProxyMode.CUT

    async def _serve(self) -> None:
        listening = self._listening
        assert listening is not None
        try:
            listener = await anyio.create_tcp_listener(local_host=self._host, local_port=self._port)
        except OSError as exc:
            listening.set_exception(exc)
            return
        async with listener, anyio.create_task_group() as tasks:
            listening.set_result(listener.extra(SocketAttribute.local_port))
            await listener.serve(self._accept, tasks)

    async def _accept(self, client: SocketStream) -> None:
        async with client:
            if self._refusing():
                return
            try:
                server = await anyio.connect_tcp(*self._target)
            except OSError as exc:
                log.warning("fault proxy: the server %s:%d is unreachable: %s", *self._target, exc)
                return
            async with server:
                if self._refusing():
                    return  # cut while it connected
                link = _Link(client, server)
                self._links.add(link)
                try:
                    with link.scope:
                        async with anyio.create_task_group() as pipes:
                            self._pipe(pipes, link, client, server)
                            self._pipe(pipes, link, server, client)
                finally:
                    self._links.discard(link)

    def _pipe(
        self, tasks: TaskGroup, link: _Link, source: SocketStream, sink: SocketStream
    ) -> None:
        """Read from ``source`` and write to ``sink`` as the mode says; a delayed chunk waits in
        a queue so that reading goes on meanwhile."""
        send, receive = anyio.create_memory_object_stream[tuple[float, bytes]](1024)

        async def read() -> None:
            async with send:
                while True:
                    try:
                        data = await source.receive(_CHUNK)
                    except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                        break
                    if self._mode is not ProxyMode.FORWARD:
                        link.lossy = True
                        self.dropped += len(data)
                        continue
                    await send.send((anyio.current_time() + self._delay, data))
            # One side ended: so does the link (as a closed TCP connection would).
            link.scope.cancel()

        async def write() -> None:
            async with receive:
                async for due, data in receive:
                    await anyio.sleep(max(due - anyio.current_time(), 0.0))
                    try:
                        await sink.send(data)
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                        link.scope.cancel()
                        return
                    self.forwarded += len(data)

        tasks.start_soon(read)
        tasks.start_soon(write)


class KafkaProxies:
    """A `FaultProxy` per Kafka broker, in front of the broker's proxied listener, which
    advertises the proxy: the client given `bootstrap` learns only the proxies' addresses, so all
    its Kafka traffic passes them, while clients of the brokers' own addresses are untouched.

    Made by `LocalCluster.kafka_proxies()`, which chooses the listeners; ``proxies[i]`` is broker
    ``i``'s proxy (the index of ``LocalCluster.stop_broker()``), and `drop()`, `cut()`,
    `delay()` and `forward()` act on every broker's at once.
    """

    def __init__(self, routes: Sequence[tuple[str, int]]) -> None:
        """Args:
        routes: per broker, in order, the ``host:port`` of its proxied listener and the port
            its proxy must listen on (the one that listener advertises).
        """
        self._proxies = [FaultProxy(target, port=port) for target, port in routes]

    @property
    def bootstrap(self) -> str:
        """Every broker's proxy, comma-separated: the bootstrap servers of the client whose
        traffic goes through them (once started)."""
        return ",".join(proxy.address for proxy in self._proxies)

    @property
    def connections(self) -> int:
        """Client connections open now, over every broker's proxy."""
        return sum(proxy.connections for proxy in self._proxies)

    @property
    def forwarded(self) -> int:
        """Bytes passed on, both ways, by every broker's proxy."""
        return sum(proxy.forwarded for proxy in self._proxies)

    @property
    def dropped(self) -> int:
        """Bytes swallowed, both ways, by every broker's proxy."""
        return sum(proxy.dropped for proxy in self._proxies)

    def __getitem__(self, broker: int) -> FaultProxy:
        return self._proxies[broker]

    def __len__(self) -> int:
        return len(self._proxies)

    def __iter__(self) -> Iterator[FaultProxy]:
        return iter(self._proxies)

    def forward(self) -> None:
        """Pass every broker's traffic on again (see `FaultProxy.forward()`)."""
        for proxy in self._proxies:
            proxy.forward()

    def drop(self) -> None:
        """Swallow every broker's traffic, connections kept open: a network partition between
        the client and all of Kafka (see `FaultProxy.drop()`)."""
        for proxy in self._proxies:
            proxy.drop()

    def delay(self, seconds: float) -> None:
        """Pass every broker's traffic on ``seconds`` late (see `FaultProxy.delay()`)."""
        for proxy in self._proxies:
            proxy.delay(seconds)

    def cut(self) -> None:
        """Close every connection to every broker, and refuse new ones until `forward()` (see
        `FaultProxy.cut()`)."""
        for proxy in self._proxies:
            proxy.cut()

    async def start(self) -> None:
        """Start every broker's proxy; if one cannot listen, stop those started and raise.

        Raises:
            OSError: a proxy's port is taken.
        """
        try:
            for proxy in self._proxies:
                await proxy.start()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop every broker's proxy, closing its connections."""
        for proxy in self._proxies:
            await proxy.stop()

    async def __aenter__(self) -> KafkaProxies:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
