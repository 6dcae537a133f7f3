"""What OpenTelemetry costs a member: the ``async for`` loop and a no-op ``process()`` handler,
each with telemetry turned off (the code path of an install without the ``otel`` extra: the
member imports nothing of OpenTelemetry), with the API and no SDK (the extra installed, nothing
configured), and with the SDK (every span recorded and batched to an exporter that drops them,
the metrics aggregated in memory).

Each variant runs in a process of its own (a process's global providers are set once), on the
same topic with a fresh group, alternating which goes first each round; its clock runs from the
first batch to the last record. Ratios are to the variant "off" of the same mode in the same
run (the paired ratio: the median of each round's ratio, of wall-clock rates and of CPU
seconds); the per-record overhead is the difference of the medians' seconds per record. On a
shared machine the CPU ratio is the steadier: the wall clock of a loop that reads faster than
the broker answers mostly measures waiting. Results go to ``benchmarks/results/tracing.md``.

    python benchmarks/tracing.py [--rounds 5] [--records 300000] [--process-records 50000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Sequence

from common import (
    RESULTS,
    create_topic,
    fill,
    fresh,
    markdown_table,
    median,
    table,
    worker_addresses,
)

from aio_cluster import ConsumerGroup, Record
from aio_cluster.local import LocalCluster

VARIANTS = {
    "off": "off (as without the extra)",
    "api": "API, no SDK",
    "sdk": "SDK, every span exported",
}
MODES = {"loop": "async for", "process": "process(), no-op handler"}


def _configure_sdk() -> None:
    """The SDK as an application would set it up, with an exporter that drops what it gets."""
    from opentelemetry import metrics, trace  # noqa: PLC0415  # the sdk variant only
    from opentelemetry.sdk.metrics import MeterProvider  # noqa: PLC0415
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: PLC0415
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import (  # noqa: PLC0415
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Dropping(SpanExporter):
        def export(self, spans: Sequence[object]) -> SpanExportResult:  # type: ignore[override]
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropping()))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))


async def consume(args: argparse.Namespace) -> dict[str, float]:
    """Read ``args.records`` records in one mode; seconds and CPU seconds from the first batch."""
    started: list[float] = []
    taken = 0
    done = asyncio.Event()

    def count(records: int) -> None:
        nonlocal taken
        if not started:
            started.extend((time.perf_counter(), time.process_time()))
        taken += records
        if taken >= args.records:
            done.set()

    async with ConsumerGroup(
        fresh("bench-otel"), args.bootstrap, args.zookeeper, args.topic
    ) as group:
        if args.mode == "loop":
            async for _partition, batch in group:
                count(len(batch))
                if done.is_set():
                    break
        else:

            async def handler(_record: Record) -> None:
                count(1)

            running = asyncio.create_task(group.process(handler))
            await done.wait()
            ended = (time.perf_counter(), time.process_time())
            await group.close()
            await running
            return {"seconds": ended[0] - started[0], "cpu": ended[1] - started[1]}
    return {"seconds": time.perf_counter() - started[0], "cpu": time.process_time() - started[1]}


def worker(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.ERROR)
    if args.variant == "sdk":
        _configure_sdk()
    result = asyncio.run(consume(args))
    print(json.dumps(result))


def measure(args: argparse.Namespace, variant: str, mode: str, records: int) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if variant == "off":
        env["OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"] = "aio_cluster"
    command = [
        sys.executable,
        __file__,
        "--worker",
        *("--variant", variant, "--mode", mode, "--records", str(records)),
        *("--bootstrap", args.bootstrap, "--zookeeper", args.zookeeper, "--topic", args.topic),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=True, env=env)
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


async def main(args: argparse.Namespace) -> None:
    async with LocalCluster() as cluster:
        args.bootstrap, args.zookeeper = cluster.bootstrap, cluster.zookeeper
        args.topic = await create_topic(cluster.bootstrap, 4)
        await fill(cluster.bootstrap, args.topic, args.records, 100)
        results: dict[tuple[str, str], list[dict[str, float]]] = {}
        names = list(VARIANTS)
        for round_ in range(args.rounds):
            shift = round_ % len(names)
            for mode, records in (("loop", args.records), ("process", args.process_records)):
                for variant in names[shift:] + names[:shift]:
                    figures = await asyncio.to_thread(measure, args, variant, mode, records)
                    figures["records"] = records
                    results.setdefault((mode, variant), []).append(figures)
                    print(f"round {round_ + 1} {mode} {variant}: {figures}", file=sys.stderr)
    report(args, results)


def report(
    args: argparse.Namespace, results: dict[tuple[str, str], list[dict[str, float]]]
) -> None:
    headers = [
        "mode",
        "telemetry",
        "records/s (median)",
        "ratio",
        "paired ratio",
        "µs per record more",
        "CPU µs per record",
        "CPU paired ratio",
    ]
    rows = []
    for mode, mode_label in MODES.items():
        base = results[mode, "off"]
        base_per_record = median([f["seconds"] / f["records"] for f in base])
        for variant, label in VARIANTS.items():
            runs = results[mode, variant]
            per_record = median([f["seconds"] / f["records"] for f in runs])
            paired = median(
                [
                    (b["seconds"] / b["records"]) / (f["seconds"] / f["records"])
                    for f, b in zip(runs, base, strict=True)
                ]
            )
            rows.append(
                [
                    mode_label,
                    label,
                    f"{1 / per_record:,.0f}",
                    f"{base_per_record / per_record:.3f}",
                    f"{paired:.3f}",
                    f"{(per_record - base_per_record) * 1e6:+.2f}",
                    f"{median([f['cpu'] / f['records'] for f in runs]) * 1e6:.2f}",
                    f"{median([b['cpu'] / f['cpu'] for f, b in zip(runs, base, strict=True)]):.3f}",
                ]
            )
    title = (
        f"{args.records:,} records of 100 B on 4 partitions (process(): the first "
        f"{args.process_records:,}), {args.rounds} alternating rounds, medians, one process per run"
    )
    print(title)
    print(table(headers, rows))
    command = "python benchmarks/tracing.py " + " ".join(sys.argv[1:])
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "tracing.md").write_text(
        f"# What OpenTelemetry costs\n\n{title}.\n\n`{command.strip()}`, {when}\n\n"
        + markdown_table(headers, rows)
        + "\n"
    )


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--process-records", type=int, default=50_000)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--variant", choices=list(VARIANTS), help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=list(MODES), help=argparse.SUPPRESS)
    worker_addresses(parser)
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse()
    if arguments.worker:
        worker(arguments)
    else:
        asyncio.run(main(arguments))
