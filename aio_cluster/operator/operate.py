"""Pause, resume and skip: an operator's control of a running group, read and written. What is
written, and how two operators' writes exclude each other, is
`aio_cluster.control.store.ControlStore`'s; what is acted on and a skip's plan are computed in
`aio_cluster.operator.controls`. The command's ``pause``, ``resume`` and ``skip`` print what
these return.

Every name is checked before anything is written: the topics and partitions in Kafka. A write
the ACL refuses is said in the command's words (`aio_cluster.operator.looks.refusable`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from ..control.model import Key, Pause
from ..control.store import ControlStore
from ..errors import ConfigurationError
from ..kafka.offset_reader import OffsetReader
from ..zookeeper.client import ZooKeeper
from ..zookeeper.layout import GroupLayout, control_path
from . import looks, survey
from .controls import SkipPlan, plan_skip, select_keys

__all__ = ["PauseAction", "pause_targets", "plan_group_skip", "request_skip", "write_pauses"]

PauseAction = Literal["pause", "resume"]
"""What a pause's write does: pause the partitions, or lift their pauses."""


async def pause_targets(
    zk: ZooKeeper,
    kafka: OffsetReader,
    store: ControlStore,
    action: PauseAction,
    topics: Sequence[str],
    wanted: Sequence[int] | None,
) -> tuple[list[Key], list[str]]:
    """The partitions a pause or a resume of ``store``'s group acts on, and the topics of the
    group's that Kafka no longer has. Those of the named ``topics`` (each one Kafka must have),
    else of every topic of the group's (and, to resume, every topic with a pause); a topic
    Kafka no longer has keeps only its pauses, which a resume may lift. ``wanted``: the
    partition numbers, None for all of them.

    Raises:
        ConfigurationError: a named topic Kafka does not have, a wanted partition a topic
            does not have.
    """
    group = store.group
    paused = (await store.read()).paused if action == "resume" else {}
    if topics:
        named = list(topics)
    else:
        members = await survey.read_members(zk, group)
        held = await survey.group_topics(zk, group, members.values())
        named = sorted({*held, *(topic for topic, _ in paused)})
    partitions: dict[str, list[int]] = {}
    gone: list[Key] = []
    missing: list[str] = []
    for topic in named:
        try:
            partitions[topic] = await kafka.partitions(topic)
        except ConfigurationError:
            if topics:
                raise
            gone += [key for key in paused if key[0] == topic]
            missing.append(topic)
    gone = [key for key in gone if wanted is None or key[1] in wanted]
    return select_keys(partitions, wanted) + sorted(gone), missing


async def write_pauses(
    store: ControlStore, action: PauseAction, keys: Sequence[Key], by: str
) -> list[Pause]:
    """Pause or resume the partitions, by ``by``: the pauses written or lifted (those paused
    already, or not paused, are left out)."""
    path = control_path(store.group)
    if action == "pause":
        return await looks.refusable(path, store.pause(keys, by))
    return await looks.refusable(path, store.resume(keys, by))


async def plan_group_skip(
    zk: ZooKeeper,
    kafka: OffsetReader,
    store: ControlStore,
    topic: str,
    partition: int,
    to_offset: int | None,
) -> SkipPlan:
    """The plan of a skip of one partition of ``store``'s group, from what both servers hold
    now: its owner, stored offset, bounds, stop and pending skip.

    Raises:
        ConfigurationError: Kafka has no such topic or partition.
        ControlConflictError, SkipRefusedError: the skip cannot be made (`plan_skip`).
    """
    select_keys({topic: await kafka.partitions(topic)}, [partition])
    layout = GroupLayout(store.group, topic)
    controls = await store.read()
    owners = await survey.read_owners(zk, layout)
    stored = (await survey.read_stored(zk, layout)).get(partition)
    bounds = looks.by_partition(await kafka.bounds({topic: [partition]}))[partition]
    key = (topic, partition)
    return plan_skip(
        key,
        owners.get(partition),
        stored if isinstance(stored, int) else None,
        bounds,
        controls.stopped.get(key),
        controls.skips.get(key),
        to_offset,
    )


async def request_skip(store: ControlStore, plan: SkipPlan, by: str) -> None:
    """Ask the partition's owner to apply the skip as planned, by ``by``.

    The offset the plan showed, never "past whatever it is stopped on now": a partition stopped
    on another record meanwhile refuses the skip.
    """
    await looks.refusable(
        control_path(store.group),
        store.request_skip(plan.topic, plan.partition, plan.target, by),
    )
