"""``aio-cluster pause``, ``resume`` and ``skip``: an operator's control of a running group, one
function per subcommand, its I/O. What is written, and how two operators' writes exclude each
other, is `aio_cluster.control.store.ControlStore`'s; what the command acts on and a skip's plan
are computed in `aio_cluster.cli.controls`.

Every name is checked before anything is written: the group in ZooKeeper, the topics and
partitions in Kafka. A write refused (by the ACL, a conflict, a skip that cannot be applied) is
one line, and nothing was changed.
"""

from __future__ import annotations

import json
import sys

from ..control.model import Key
from ..control.store import ControlStore
from ..errors import ConfigurationError
from ..kafka.offset_reader import OffsetReader
from ..zookeeper.client import ZooKeeper
from ..zookeeper.layout import GroupLayout, control_path
from . import looks, survey, tables
from .arguments import PROG, Connection, PauseOptions, SkipOptions
from .controls import pause_rows, plan_skip, select_keys

__all__ = ["pause", "skip"]


async def pause(connection: Connection, options: PauseOptions) -> int:
    """Pause or resume (``options.action``) the partitions the options name."""
    group = options.group
    async with looks.open_zookeeper(connection) as zk, looks.open_kafka(connection) as kafka:
        await survey.require_group(zk, group)
        store = ControlStore(zk, group)
        keys = await _selected(zk, kafka, store, options)
        if not keys:
            raise ConfigurationError(
                f"group {group!r} holds no offsets or claims of any topic: name one with --topic"
            )
        if options.action == "pause":
            done = await looks.refusable(control_path(group), store.pause(keys, options.by))
        else:
            done = await looks.refusable(control_path(group), store.resume(keys, options.by))
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


async def _selected(
    zk: ZooKeeper, kafka: OffsetReader, store: ControlStore, options: PauseOptions
) -> list[Key]:
    """The partitions the options name: of the named topics (each one Kafka must have), else
    of every topic of the group's (and, to resume, every topic with a pause); a topic Kafka
    no longer has keeps only its pauses, which a resume may lift."""
    paused = (await store.read()).paused if options.action == "resume" else {}
    if options.topics:
        topics = list(options.topics)
    else:
        members = await survey.read_members(zk, options.group)
        held = await survey.group_topics(zk, options.group, members.values())
        topics = sorted({*held, *(topic for topic, _ in paused)})
    partitions: dict[str, list[int]] = {}
    gone: list[Key] = []
    for topic in topics:
        try:
            partitions[topic] = await kafka.partitions(topic)
        except ConfigurationError:
            if options.topics:
                raise
            gone += [key for key in paused if key[0] == topic]
            print(f"{PROG}: topic {topic} does not exist in Kafka", file=sys.stderr)
    wanted = options.partitions
    gone = [key for key in gone if wanted is None or key[1] in wanted]
    return select_keys(partitions, wanted) + sorted(gone)


async def skip(connection: Connection, options: SkipOptions) -> int:
    """Plan a skip of one partition and, with ``--execute``, ask its owner to apply it."""
    group, topic, partition = options.group, options.topic, options.partition
    async with looks.open_zookeeper(connection) as zk, looks.open_kafka(connection) as kafka:
        await survey.require_group(zk, group)
        select_keys({topic: await kafka.partitions(topic)}, [partition])
        layout = GroupLayout(group, topic)
        store = ControlStore(zk, group)
        controls = await store.read()
        owners = await survey.read_owners(zk, layout)
        stored = (await survey.read_stored(zk, layout)).get(partition)
        bounds = looks.by_partition(await kafka.bounds({topic: [partition]}))[partition]
        key = (topic, partition)
        plan = plan_skip(
            key,
            owners.get(partition),
            stored if isinstance(stored, int) else None,
            bounds,
            controls.stopped.get(key),
            controls.skips.get(key),
            options.to_offset,
        )
        if options.execute:
            # The offset the plan showed, never "past whatever it is stopped on now": a
            # partition stopped on another record meanwhile refuses the skip.
            await looks.refusable(
                control_path(group),
                store.request_skip(topic, partition, plan.target, options.by),
            )
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
