"""``aio-cluster pause``, ``resume`` and ``skip``: an operator's control of a running group, one
function per subcommand, what it prints. What is acted on, a skip's plan and the writes are
`aio_cluster.operator.operate`'s.

Every name is checked before anything is written: the group in ZooKeeper, the topics and
partitions in Kafka. A write refused (by the ACL, a conflict, a skip that cannot be applied) is
one line, and nothing was changed.
"""

from __future__ import annotations

import json
import sys

from ..control.store import ControlStore
from ..errors import ConfigurationError
from ..operator import looks, operate, survey
from ..operator.connection import Connection
from ..operator.controls import pause_rows
from ..operator.environment import PROG
from . import tables
from .options import PauseOptions, SkipOptions

__all__ = ["pause", "skip"]


async def pause(connection: Connection, options: PauseOptions) -> int:
    """Pause or resume (``options.action``) the partitions the options name."""
    group = options.group
    async with looks.open_zookeeper(connection) as zk, looks.open_kafka(connection) as kafka:
        await survey.require_group(zk, group)
        store = ControlStore(zk, group)
        keys, missing = await operate.pause_targets(
            zk, kafka, store, options.action, options.topics, options.partitions
        )
        for topic in missing:
            print(f"{PROG}: topic {topic} does not exist in Kafka", file=sys.stderr)
        if not keys:
            raise ConfigurationError(
                f"group {group!r} holds no offsets or claims of any topic: name one with --topic"
            )
        done = await operate.write_pauses(store, options.action, keys, options.by)
    if options.json:
        print(json.dumps(pause_rows(done), indent=2))
        return 0
    if done:
        tables.show(tables.pauses_table(done, resumed=options.action == "resume"))
    left = len(keys) - len(done)
    if options.action == "pause":
        said = f"paused {len(done)} partition(s) of group {group}"
        if left:
            said += f"; {left} paused already"
    else:
        said = f"resumed {len(done)} partition(s) of group {group}"
        if left:
            said += f"; {left} not paused"
    tables.show(said)
    return 0


async def skip(connection: Connection, options: SkipOptions) -> int:
    """Plan a skip of one partition and, with ``--execute``, ask its owner to apply it."""
    async with looks.open_zookeeper(connection) as zk, looks.open_kafka(connection) as kafka:
        await survey.require_group(zk, options.group)
        store = ControlStore(zk, options.group)
        plan = await operate.plan_group_skip(
            zk, kafka, store, options.topic, options.partition, options.to_offset
        )
        if options.execute:
            await operate.request_skip(store, plan, options.by)
    if options.json:
        print(json.dumps(plan.as_json(requested=options.execute), indent=2))
        return 0
    for line in plan.lines():
        tables.show(line)
    if options.execute:
        tables.show(
            f"requested: {plan.owner} applies the skip at its next batch (describe shows it "
            "pending until then)"
        )
    else:
        tables.show("dry run: nothing changed; add --execute to request this skip")
    return 0
