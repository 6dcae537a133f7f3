"""What the benchmarks share: a cluster (the local one, or the one the environment names), fresh
topics, a table printer, and the results written under ``benchmarks/results/`` (a Markdown table
and a PNG chart; matplotlib comes with the ``bench`` extra)."""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import textwrap
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from rich.console import Console
from rich.table import Table

from aio_cluster.local.probes import zookeeper_monitor

RESULTS = Path(__file__).parent / "results"


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


STEP = 5_000
"""Partitions created per request. A KRaft controller refuses a request of more than 10,000
records (BoundedListTooLongException), and a topic takes one record for itself and one per
partition: 10,000 partitions at once are refused, and aiokafka reports that only as an error
code in the response. Members then wait for a topic that never comes."""


async def create_topic(bootstrap: str, partitions: int) -> str:
    """A fresh topic of ``partitions`` partitions, created in steps of `STEP`; returns once the
    broker's metadata has all of them.

    Raises:
        RuntimeError: Kafka refused a step (its error code and message are named).
    """
    name = fresh("bench")
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=120_000)
    await admin.start()
    try:
        first = min(partitions, STEP)
        response = await admin.create_topics([NewTopic(name, first, 1)], timeout_ms=120_000)
        _check(response.topic_errors, f"create {name} with {first} partitions")
        for step in range(first + STEP, partitions + STEP, STEP):
            total = min(step, partitions)
            response = await admin.create_partitions(
                {name: NewPartitions(total)}, timeout_ms=120_000
            )
            _check(response.topic_errors, f"grow {name} to {total} partitions")
        while True:
            (described,) = await admin.describe_topics([name])
            if not described["error_code"] and len(described["partitions"]) == partitions:
                break
            await asyncio.sleep(0.2)
    finally:
        await admin.close()
    return name


async def delete_topic(bootstrap: str, name: str) -> None:
    """Delete a topic a benchmark made: a shared cluster keeps a file open for each partition,
    and a broker past its open-files limit dies."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=120_000)
    await admin.start()
    try:
        await admin.delete_topics([name], timeout_ms=120_000)
    finally:
        await admin.close()


def _check(errors: Sequence[Sequence[object]], what: str) -> None:
    for error in errors:
        if error[1]:
            raise RuntimeError(f"Kafka refused to {what}: error {error[1]} {error[2:]}")


async def fill(
    bootstrap: str, topic: str, count: int, size: int, *, batch_size: int = 1_048_576
) -> None:
    """Produce ``count`` messages of ``size`` bytes, spread over the partitions by key, in
    producer batches of ``batch_size`` bytes."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=batch_size, acks=1
    )
    await producer.start()
    try:
        payload = b"x" * size
        for i in range(count):
            await producer.send(topic, key=str(i).encode(), value=payload)
        await producer.flush()
    finally:
        await producer.stop()


def worker_addresses(parser: argparse.ArgumentParser) -> None:
    """The hidden options by which a benchmark tells its worker processes the cluster and the
    topic it made: ``--bootstrap``, ``--zookeeper``, ``--topic``."""
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--zookeeper", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)


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


def show(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Print a table with its title on the terminal; returns it as Markdown for a results file
    (the title as a sentence, then the table)."""
    shown = Table(title=title)
    for header in headers:
        shown.add_column(header, justify="right")
    for row in rows:
        shown.add_row(*row)
    Console(width=180).print(shown)
    return f"{title}.\n\n{markdown_table(headers, rows)}\n"


def write_result(name: str, heading: str, table: str, note: str) -> None:
    """Write ``benchmarks/results/<name>``: ``heading``, the command that ran with when and the
    machine's load average, then ``table`` (from `show()`) and ``note``."""
    command = " ".join(["python", f"benchmarks/{Path(sys.argv[0]).name}", *sys.argv[1:]])
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = os.getloadavg()[0]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / name).write_text(
        f"# {heading}\n\n`{command}`, {when}, load average {load:.1f}\n\n{table}\n{note}\n"
    )


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


async def zookeeper_packets(connect: str) -> int:
    """The requests ZooKeeper received so far (its ``mntr`` ``zk_packets_received``)."""
    return int((await zookeeper_monitor(connect))["zk_packets_received"])
