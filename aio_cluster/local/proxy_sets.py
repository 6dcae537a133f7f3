"""ProxySets: the Kafka listeners a cluster was started with for proxies, lent one set at a time.

A cluster started with ``kafka_proxies=N`` has N sets of proxied listeners, a listener per broker
in each set that advertises its proxy's address (see `aio_cluster.local.servers.Ports`). A test
that cuts one client off Kafka borrows a set for a block, as `KafkaProxies` started on those
ports, and gives it back at the block's end. Apart from `LocalCluster` because the lending has
state of its own (which sets are out) and rules of its own (one client per set, every proxy
stopped on return, a cancelled test included), none of which is the cluster's lifecycle.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import anyio

from ..errors import LocalClusterError
from . import config
from .faults import KafkaProxies
from .servers import Ports

__all__ = ["ProxySets"]


class ProxySets:
    """The proxied listeners of a cluster's ``layout``, each set lent to one client at a time."""

    def __init__(self, layout: Ports) -> None:
        self._layout = layout
        self._in_use: set[int] = set()

    @contextlib.asynccontextmanager
    async def lend(self) -> AsyncIterator[KafkaProxies]:
        """A free set's proxies, started, for the block; stopped and the set free again after it.

        Raises:
            LocalClusterError: the cluster has no sets, every set is in use, or a proxy's port
                was taken meanwhile.
        """
        layout = self._layout
        if not layout.proxied:
            raise LocalClusterError(
                "this cluster has no listeners for Kafka proxies: start it with "
                "LocalCluster(kafka_proxies=1)"
            )
        free = [n for n in range(len(layout.proxied)) if n not in self._in_use]
        if not free:
            raise LocalClusterError(
                f"the cluster's kafka_proxies={len(layout.proxied)} sets are all in use; "
                "LocalCluster(kafka_proxies=N) lets N clients through proxies at once"
            )
        number = free[0]
        proxies = KafkaProxies(
            [
                (f"{config.HOST}:{listener}", proxy)
                for listener, proxy in zip(
                    layout.proxied[number], layout.proxies[number], strict=True
                )
            ]
        )
        try:
            await proxies.start()
        except OSError as exc:
            raise LocalClusterError(f"a Kafka proxy could not listen: {exc}") from exc
        self._in_use.add(number)
        try:
            yield proxies
        finally:
            self._in_use.discard(number)
            with anyio.CancelScope(shield=True):  # a cancelled test leaves no proxy listening
                await proxies.stop()
