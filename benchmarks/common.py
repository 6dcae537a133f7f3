"""What the benchmarks share: a cluster (the local one, or the one the environment names), fresh
topics, and a table printer."""

from __future__ import annotations

import statistics
import uuid
from collections.abc import Sequence

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def create_topic(bootstrap: str, partitions: int) -> str:
    name = fresh("bench")
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()
    return name


async def fill(bootstrap: str, topic: str, count: int, size: int) -> None:
    """Produce ``count`` messages of ``size`` bytes, spread over the partitions by key."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=1_048_576, acks=1
    )
    await producer.start()
    try:
        payload = b"x" * size
        for i in range(count):
            await producer.send(topic, key=str(i).encode(), value=payload)
        await producer.flush()
    finally:
        await producer.stop()


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def median(values: Sequence[float]) -> float:
    return statistics.median(values)
