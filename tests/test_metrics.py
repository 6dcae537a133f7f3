"""`aio_cluster.metrics` against the real servers: the collector in process, and the examples'
``/metrics`` scraped over HTTP while they consume, with a second member joining."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from test_examples import Example, app_command, end, free_port, output

from aio_cluster import ConfigurationError, ConsumerGroup
from aio_cluster.local import LocalCluster
from aio_cluster.metrics import GroupMetrics
from aio_cluster.zookeeper.client import ZooKeeper

from conftest import MakeTopic, Produce
from support import closable, wait_until


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


@pytest.mark.asyncio
async def test_collector_shows_lag_falling_to_zero_and_the_counters(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, group_name: str
) -> None:
    topic = await make_topic(partitions=2)
    counts = await produce(topic, 40)
    registry = CollectorRegistry()
    async with ConsumerGroup(
        group_name, cluster.bootstrap, cluster.zookeeper, topic, commit_interval=0.1
    ) as group:
        metrics = GroupMetrics(group, registry=registry)
        who = {"group": group_name, "member": group.id}
        # Nothing handed out yet: each partition's lag is all of its records.
        await metrics.refresh()
        for partition in (0, 1):
            where = {**who, "topic": topic, "partition": str(partition)}
            assert value(registry, "aio_cluster_partition_lag", **where) == counts[partition]
            assert value(registry, "aio_cluster_partition_end_offset", **where) == counts[partition]
            assert value(registry, "aio_cluster_partition_stored_offset", **where) is None
        assert value(registry, "aio_cluster_records_total", **who) == 0
        assert value(registry, "aio_cluster_claimed_partitions", **who) == 2
        assert value(registry, "aio_cluster_session_state", **who, state="connected") == 1
        assert value(registry, "aio_cluster_session_state", **who, state="lost") == 0
        assert value(registry, "aio_cluster_member_state", **who, state="joined") == 1

        taken = 0
        async with contextlib.aclosing(closable(group.batches(commit=False))) as batches:
            async for partition, batch in batches:
                await group.commit(partition, batch[-1].offset + 1)
                taken += len(batch)
                if taken == 40:
                    break

        async def caught_up() -> bool:
            await metrics.refresh()
            return all(
                value(registry, "aio_cluster_partition_lag", **who, topic=topic, partition=str(p))
                == 0
                for p in (0, 1)
            )

        await wait_until(caught_up, what="the lag gauges fall to 0")
        for partition in (0, 1):
            where = {**who, "topic": topic, "partition": str(partition)}
            assert (
                value(registry, "aio_cluster_partition_stored_offset", **where) == counts[partition]
            )
            # (The batch the loop broke out of is handed out again: its position went back.)
            position = value(registry, "aio_cluster_partition_position", **where)
            assert position is not None
            assert 0 <= position <= counts[partition]
        assert value(registry, "aio_cluster_records_total", **who) == 40
        batches_total = value(registry, "aio_cluster_batches_total", **who)
        assert batches_total is not None
        assert batches_total >= 2
        rebalances = value(registry, "aio_cluster_rebalances_total", **who)
        assert rebalances is not None
        assert rebalances >= 1
        assert value(registry, "aio_cluster_rebalance_duration_seconds_count", **who) == rebalances
        assert value(registry, "aio_cluster_claim_timeouts_total", **who) == 0
    await metrics.refresh()
    gone = value(registry, "aio_cluster_partition_lag", **who, topic=topic, partition="0")
    assert gone is None  # closed
    metrics.unregister()


def labels_by_series(registry: CollectorRegistry) -> dict[str, list[dict[str, str]]]:
    """Family name -> the labels of each of its samples."""
    return {
        family.name: [dict(sample.labels) for sample in family.samples]
        for family in registry.collect()
    }


@pytest.mark.asyncio
async def test_a_member_on_many_topics_labels_each_series_with_one_topic(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, group_name: str
) -> None:
    """Per partition, the partition's own topic; the member's own figures carry no topic, for
    a list of topics and for a pattern alike (never the topics joined, never the regex)."""
    a, b = await make_topic(partitions=2), await make_topic(partitions=1)
    counts = {a: await produce(a, 6), b: await produce(b, 3)}
    pattern = re.compile(f"{re.escape(a)}|{re.escape(b)}")
    for topics, name in (([a, b], f"{group_name}-list"), (pattern, f"{group_name}-pattern")):
        registry = CollectorRegistry()
        async with ConsumerGroup(name, cluster.bootstrap, cluster.zookeeper, topics) as group:
            await wait_until(lambda: len(group.claimed) == 3, what=f"{name} claims both topics")
            metrics = GroupMetrics(group, registry=registry)
            await metrics.refresh()
            who = {"group": name, "member": group.id}
            for topic, partition in ((a, 0), (a, 1), (b, 0)):
                where = {**who, "topic": topic, "partition": str(partition)}
                lag = value(registry, "aio_cluster_partition_lag", **where)
                assert lag == counts[topic][partition], (topics, topic, partition)
            assert value(registry, "aio_cluster_claimed_partitions", **who) == 3
            assert value(registry, "aio_cluster_records_total", **who) == 0
            assert value(registry, "aio_cluster_member_state", **who, state="joined") == 1
            for family, samples in labels_by_series(registry).items():
                for labels in samples:
                    if family.startswith("aio_cluster_partition_"):
                        assert labels["topic"] in (a, b), (family, labels)
                    else:
                        assert "topic" not in labels, (family, labels)
            metrics.unregister()


def test_bad_buckets_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="buckets"):
        GroupMetrics(registry=None, buckets=[1.0, 0.5])
    with pytest.raises(ConfigurationError, match="buckets"):
        GroupMetrics(registry=None, buckets=[])


def test_without_prometheus_client_the_import_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['prometheus_client'] = None\n"
        "try:\n    import aio_cluster.metrics\n"
        "except Exception as exc:\n    print(type(exc).__name__, exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.startswith("ConfigurationError")
    assert "aio-cluster[metrics]" in result.stdout


def scraped(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """sample name -> (sorted labels -> value), of Prometheus's text format."""
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = tuple(sorted(sample.labels.items()))
            found.setdefault(sample.name, {})[key] = sample.value
    return found


@pytest.mark.asyncio
@pytest.mark.parametrize("app", ["fastapi", "aiohttp"])
async def test_app_serves_metrics_over_http_lag_falls_and_a_rebalance_is_counted(
    app: str,
    cluster: LocalCluster,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
    tmp_path: Path,
    zk: ZooKeeper,
) -> None:
    topic = await make_topic(partitions=3)
    await produce(topic, 200)
    port = free_port()
    log = tmp_path / f"{app}.log"
    example = Example(cluster, zk, group_name, topic, tmp_path)
    seen: list[dict[str, dict[tuple[tuple[str, str], ...], float]]] = []
    async with example.start(app_command(app, port), log) as process:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:

            async def scrape() -> bool:
                try:
                    response = await client.get("/metrics")
                except httpx.TransportError:
                    return False  # not listening yet
                assert response.status_code == 200, response.text
                assert response.headers["content-type"].startswith("text/plain")
                seen.append(scraped(response.text))
                return True

            def lags() -> dict[str, float]:
                return {
                    dict(labels)["partition"]: lag
                    for labels, lag in seen[-1].get("aio_cluster_partition_lag", {}).items()
                }

            def total(name: str) -> float:
                return sum(seen[-1].get(name, {}).values())

            async def caught_up(records: int) -> bool:
                return (
                    await scrape()
                    and total("aio_cluster_records_total") == records
                    and lags() == {"0": 0, "1": 0, "2": 0}
                )

            await wait_until(lambda: caught_up(200), timeout=60, what=f"{app}: lag 0 after 200")
            labels = next(iter(seen[-1]["aio_cluster_records_total"]))
            assert {name for name, _ in labels} == {"group", "member"}
            assert dict(labels)["group"] == group_name
            for labels in seen[-1]["aio_cluster_partition_lag"]:
                assert dict(labels)["topic"] == topic
            # More records while it serves: the scrapes follow them to lag 0 again.
            await produce(topic, 100, start=200)
            await wait_until(lambda: caught_up(300), what=f"{app}: lag 0 after 300")
            before = total("aio_cluster_rebalances_total")
            assert before >= 1
            assert total("aio_cluster_claimed_partitions") == 3

            # A second member joins: the app's member counts the rebalance and gives up a share.
            async with ConsumerGroup(
                group_name, cluster.bootstrap, cluster.zookeeper, topic
            ) as second:

                async def rebalanced() -> bool:
                    return (
                        await scrape()
                        and total("aio_cluster_rebalances_total") > before
                        and total("aio_cluster_claimed_partitions") == 3 - len(second.claimed)
                        and len(second.claimed) >= 1
                    )

                await wait_until(rebalanced, timeout=60, what=f"{app}: a rebalance counted")
                rebalances = total("aio_cluster_rebalances_total")
                assert total("aio_cluster_rebalance_duration_seconds_count") == rebalances
                assert total("aio_cluster_rebalance_duration_seconds_sum") > 0
                assert len(lags()) == 3 - len(second.claimed)
        await end(process, log)
    assert "Traceback" not in output(log)
