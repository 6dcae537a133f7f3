"""Meters: a member's metrics through the OpenTelemetry API, beside the Prometheus ones.

Named as the messaging conventions name them where they have a name, else under
``aio_cluster.``::

    messaging.client.consumed.messages  counter    records handed to a body or a handler
    messaging.process.duration          histogram  seconds per async for body, per handler run
    aio_cluster.partition.lag           gauge      records after the stored offset, per partition
    aio_cluster.partition.paused        gauge      1 per claimed partition paused, with
                                                   aio_cluster.paused_by: operator or member
    aio_cluster.rebalances              counter    rebalances finished
    aio_cluster.rebalance.duration      histogram  seconds per rebalance

The instruments are made once per process and shared by its members (a meter keeps the first
instrument of a name; a second observable gauge's callback would be dropped). The lag is read
when the meter provider collects (in its own thread, with a periodic reader): from the log end
the last fetch saw and the offset last stored, so collecting asks no server; a member that is
gone (collected) is not read.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Mapping

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Counter, Histogram, Observation

from .attributes import CONSUMER_GROUP, DURATION_BUCKETS, ERROR_TYPE, KAFKA, SYSTEM

__all__ = ["PAUSED_BY", "LagReading", "Meters", "PausedReading"]

LagReading = Callable[[], Iterable[tuple[Mapping[str, str | int], int]]]
"""Each claimed partition's attributes and lag, as the member knows them now."""

PausedReading = Callable[[], Iterable[tuple[Mapping[str, str | int], str]]]
"""Each paused claimed partition's attributes and who holds it paused: ``"operator"`` (the
group-wide pause of ``aio-cluster pause``) or ``"member"`` (its own `pause()`, or
``on_failure="stop"``); a partition both hold comes twice."""

PAUSED_BY = "aio_cluster.paused_by"
"""The attribute of the paused gauge that says who holds the partition paused."""


class _Instruments:
    """The process's instruments, made on first use."""

    def __init__(self) -> None:
        meter = metrics.get_meter("aio_cluster")
        self.consumed: Counter = meter.create_counter(
            "messaging.client.consumed.messages",
            unit="{message}",
            description="Records handed to an async for body or a process() handler.",
        )
        self.duration: Histogram = meter.create_histogram(
            "messaging.process.duration",
            unit="s",
            description="How long an async for body or a process() handler run took.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
        self.rebalances: Counter = meter.create_counter(
            "aio_cluster.rebalances", unit="{rebalance}", description="Rebalances finished."
        )
        self.rebalance_duration: Histogram = meter.create_histogram(
            "aio_cluster.rebalance.duration", unit="s", description="How long rebalances took."
        )
        self.members: weakref.WeakSet[Meters] = weakref.WeakSet()
        meter.create_observable_gauge(
            "aio_cluster.partition.lag",
            callbacks=[self._observe_lag],
            unit="{message}",
            description="Records of a claimed partition after its stored offset.",
        )
        meter.create_observable_gauge(
            "aio_cluster.partition.paused",
            callbacks=[self._observe_paused],
            unit="{partition}",
            description="1 for a claimed partition paused, by who holds it (paused_by).",
        )

    def _observe_lag(self, _options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(lag, dict(attributes))
            for member in list(self.members)
            for attributes, lag in member.lag()
        ]

    def _observe_paused(self, _options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(1, {**attributes, PAUSED_BY: holder})
            for member in list(self.members)
            for attributes, holder in member.paused()
        ]


_instruments: _Instruments | None = None
_making = threading.Lock()


def _shared() -> _Instruments:
    global _instruments  # noqa: PLW0603  # one set per process, made on first use
    with _making:
        if _instruments is None:
            _instruments = _Instruments()
        return _instruments


class Meters:
    """One member's side of the shared instruments."""

    def __init__(self, group: str, lag: LagReading, paused: PausedReading) -> None:
        """Args:
        group: the group's name, on the member's own figures.
        lag: read at each collection for the lag gauge, while this object lives.
        paused: read at each collection for the paused gauge, likewise.
        """
        instruments = _shared()
        self.consumed = instruments.consumed
        self._duration = instruments.duration
        self._rebalances = instruments.rebalances
        self._rebalance_duration = instruments.rebalance_duration
        self.lag = lag
        self.paused = paused
        self._attributes: Mapping[str, str] = {SYSTEM: KAFKA, CONSUMER_GROUP: group}
        instruments.members.add(self)

    def processed(
        self, seconds: float, attributes: Mapping[str, str | int], error: str | None
    ) -> None:
        """One body or handler run ended after ``seconds``, with ``error`` (its error.type) if it
        failed."""
        self._duration.record(
            seconds, attributes if error is None else {**attributes, ERROR_TYPE: error}
        )

    def rebalanced(self, seconds: float) -> None:
        """A rebalance finished after ``seconds``."""
        self._rebalances.add(1, self._attributes)
        self._rebalance_duration.record(seconds, self._attributes)
