"""Replica placement: the racks that hold each partition's replicas, from Kafka's metadata. Pure.

A Metadata answer names each broker with its rack (``broker.rack``; from version 1) and each
partition with its replicas' brokers. The rack-aware sticky target (`aio_cluster.assign.racks`)
needs, for each partition, the racks of those brokers: a member in one of them reads the
partition from its own rack. A broker without a rack adds none, so with no rack anywhere every
partition has none and the racks change nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["Replicas", "broker_racks", "replica_racks"]

Replicas = Mapping[int, frozenset[str]]
"""partition -> the racks of its replicas."""


def broker_racks(brokers: Iterable[tuple[Any, ...]]) -> dict[int, str]:
    """node id -> its rack, for the brokers of a Metadata answer (node, host, port[, rack])
    that have one."""
    return {int(b[0]): b[3] for b in brokers if len(b) > 3 and isinstance(b[3], str) and b[3]}


def replica_racks(racks: Mapping[int, str], partitions: Iterable[tuple[int, Any]]) -> Replicas:
    """partition -> the racks of its replicas, for ``partitions`` as (id, replica node ids),
    given the brokers' ``racks``; empty when no broker has a rack. The sets are shared between
    partitions with the same replicas (a topic of 10,000 partitions over three racks has a few
    dozen)."""
    if not racks:
        return {}
    known: dict[tuple[int, ...], frozenset[str]] = {}
    found = {}
    for partition, replicas in partitions:
        key = tuple(replicas)
        placed = known.get(key)
        if placed is None:
            placed = known[key] = frozenset(racks[b] for b in key if b in racks)
        found[int(partition)] = placed
    return found
