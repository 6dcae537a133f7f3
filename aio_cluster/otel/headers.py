"""A record's headers as the carrier the globally configured propagator reads (W3C trace context
by default): the context the producer injected, or none."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter

from ..kafka.records import Record

__all__ = ["producer_context"]

Headers = Sequence[tuple[str, bytes]]


class _HeaderGetter(Getter[Headers]):
    """Reads Kafka headers, a sequence of (name, bytes) pairs in which a name may repeat."""

    def get(self, carrier: Headers, key: str) -> list[str] | None:
        values = [
            value.decode("utf-8", "replace")
            for name, value in carrier
            if name == key and value is not None
        ]
        return values or None

    def keys(self, carrier: Headers) -> list[str]:
        return [name for name, _value in carrier]


_GETTER = _HeaderGetter()


def producer_context(record: Record) -> Context | None:
    """The context the producer of ``record`` injected into its headers, or None when it injected
    none (a record without headers asks no propagator: most records of most topics carry none)."""
    headers = record.headers
    if not headers:
        return None
    found = propagate.extract(headers, getter=_GETTER, context=Context())
    return found if trace.get_current_span(found).get_span_context().is_valid else None
