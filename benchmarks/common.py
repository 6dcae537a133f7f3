"""What the benchmarks share: a cluster (the local one, or the one the environment names), fresh
topics, a table printer, and the results written under ``benchmarks/results/`` (a Markdown table
and a PNG chart; matplotlib comes with the ``bench`` extra)."""

from __future__ import annotations

import statistics
import textwrap
import uuid
from collections.abc import Sequence
from pathlib import Path

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

RESULTS = Path(__file__).parent / "results"


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


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def bar_chart(
    path: Path, labels: Sequence[str], values: Sequence[float], unit: str, title: str
) -> None:
    """A horizontal bar chart, one bar per label, written as a PNG."""
    import matplotlib  # noqa: PLC0415 (the bench extra; only the reports need it)

    matplotlib.use("Agg")
    from matplotlib import pyplot  # noqa: PLC0415

    figure, axes = pyplot.subplots(figsize=(9, 0.6 * len(labels) + 1.5))
    axes.barh(list(reversed(labels)), list(reversed(values)), color="#4a7ab5")
    axes.set_xlabel(unit)
    axes.set_title(textwrap.fill(title, 90), fontsize=9)
    for y, value in enumerate(reversed(values)):
        axes.text(value, y, f" {value:,.0f}", va="center", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
