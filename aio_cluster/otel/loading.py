"""telemetry_for(): a member's `aio_cluster.otel.telemetry.Telemetry`, or None.

None when ``opentelemetry-api`` is not installed (the ``otel`` extra; nothing of OpenTelemetry
is imported then) or when ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` names ``aio_cluster``, the
variable with which OpenTelemetry turns its instrumentations off. Otherwise on, as OpenTelemetry
instrumentations are: without an SDK configured, the API's no-op providers make it cost next to
nothing.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..kafka.topics import PartitionKey, TopicPartition

if TYPE_CHECKING:
    from .meters import LagReading, PausedReading
    from .telemetry import Telemetry

__all__ = ["DISABLING_VARIABLE", "telemetry_for"]

DISABLING_VARIABLE = "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"
"""OpenTelemetry's comma-separated list of the instrumentations that stay off."""

NAME = "aio_cluster"
"""This library's name in that list."""


def disabled(value: str | None) -> bool:
    """Whether the variable's ``value`` turns this library's telemetry off."""
    return NAME in {part.strip() for part in (value or "").split(",")}


def telemetry_for(
    group: str,
    member_id: str,
    split: Callable[[PartitionKey], TopicPartition],
    lag: LagReading,
    paused: PausedReading,
) -> Telemetry | None:
    """A member's telemetry (see `aio_cluster.otel.telemetry.Telemetry` for the arguments), or
    None without the API or when turned off (see the module)."""
    if disabled(os.environ.get(DISABLING_VARIABLE)):
        return None
    if importlib.util.find_spec("opentelemetry") is None:
        return None
    if importlib.util.find_spec("opentelemetry.trace") is None:
        return None
    from .telemetry import Telemetry  # noqa: PLC0415  # only with the extra installed

    return Telemetry(group, member_id, split, lag, paused)
