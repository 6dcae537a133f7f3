"""Spans and metrics through the OpenTelemetry API (the ``otel`` extra), beside the Prometheus
figures of `aio_cluster.metrics`.

With ``opentelemetry-api`` importable a member uses the globally configured tracer, meter and
propagator, as OpenTelemetry's own instrumentations do; without it nothing here is imported (see
`loading`). Nothing here imports a member: the member hands its parts what they need.

Modules::

    attributes.py  the messaging conventions' names and values, and error.type (pure)
    batches.py     BodySpans: the span of each async for body, current in the caller's context
    headers.py     a record's headers as a carrier for the propagator: the producer's context
    loading.py     telemetry_for(): a member's Telemetry, or None without the extra or when off
    meters.py      Meters: consumed records, processing time, lag and rebalances
    seams.py       the one private name of the API used (its proxy meter provider), checked
    telemetry.py   Telemetry: one member's tracer and meters, and the spans its parts open
"""
