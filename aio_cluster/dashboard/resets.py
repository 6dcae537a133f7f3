"""Offset resets made from the page: the plan ``aio-cluster reset-offsets`` makes, shown first,
then stored with the same fences, only by a dashboard started with writes allowed (the page's
routes check the token, `aio_cluster.dashboard.app`).

A plan is made without writing anything (no fence is created for a plan that may never be
stored). Storing it creates the fences it needs, then writes the offsets as planned in one
transaction that also bumps each partition's fence and checks that no offset node changed since
the plan read it: exactly what was shown is stored, or nothing and the page says to plan again.
Registered members that may read the topic refuse the write unless the form forces it, as
``--force`` does.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import ConfigurationError, CoordinationError
from ..kafka.offset_reader import OffsetReader
from ..operator import looks, survey
from ..operator.plans import (
    PlanRow,
    ResetTarget,
    ShiftBy,
    ToEarliest,
    ToLatest,
    ToOffset,
    ToTime,
    parse_partitions,
    parse_timestamp,
    readers,
)
from ..zookeeper.client import ZooKeeper
from ..zookeeper.layout import GroupLayout
from .kept import KeptPlans

__all__ = ["TARGETS", "Plan", "Resets", "reset_target"]

TARGETS = {
    "earliest": "the earliest retained offset",
    "latest": "the log end (skip everything)",
    "offset": "offset N",
    "shift": "N records on (negative: back)",
    "datetime": "the first record at or after an ISO 8601 time",
}
"""The reset targets the form offers, as ``reset-offsets``'s ``--to-*`` and ``--shift-by``."""


def reset_target(kind: str, value: str) -> ResetTarget:
    """The target of the form's ``kind`` (a key of `TARGETS`) and its ``value``.

    Raises:
        ConfigurationError: an unknown kind, or a value that kind cannot take.
    """
    value = value.strip()
    if kind == "earliest":
        return ToEarliest()
    if kind == "latest":
        return ToLatest()
    if kind == "datetime":
        return ToTime(parse_timestamp(value))
    if kind in ("offset", "shift"):
        try:
            number = int(value)
        except ValueError:
            raise ConfigurationError(f"{TARGETS[kind]}: {value!r} is not a number") from None
        if kind == "shift":
            return ShiftBy(number)
        if number < 0:
            raise ConfigurationError(f"an offset must not be negative, not {number}")
        return ToOffset(number)
    raise ConfigurationError(f"no such reset target {kind!r}; one of {', '.join(TARGETS)}")


@dataclass(frozen=True)
class Plan:
    """A reset shown on the page, not stored yet.

    Attributes:
        id: names it in the form that stores it (not a secret: the token guards the write).
        group: the group's name.
        topic: the topic whose offsets move.
        rows: each partition's stored and new offset, as ``reset-offsets`` prints them.
        versions: each offset node's version as the plan read it.
        registered: the members registered that may read the topic when it was planned.
    """

    id: str
    group: str
    topic: str
    rows: list[PlanRow]
    versions: dict[int, int]
    registered: list[str]


class Resets:
    """The plans made from the page, kept until stored (the newest `KeptPlans.KEPT`)."""

    def __init__(self) -> None:
        self._plans: KeptPlans[Plan] = KeptPlans("stored")

    async def plan(
        self,
        zk: ZooKeeper,
        kafka: OffsetReader,
        group: str,
        topic: str,
        target: ResetTarget,
        partitions: str,
    ) -> Plan:
        """Plan a reset of ``topic``'s offsets (``partitions`` "0,3", or "" for all of them).

        Raises:
            ConfigurationError: no such group or topic, or partitions it does not have.
        """
        await survey.require_group(zk, group)
        wanted = parse_partitions(partitions) if partitions.strip() else None
        rows, versions = await looks.plan_topic(
            zk, kafka, GroupLayout(group, topic), target, wanted, execute=False
        )
        members = await survey.read_members(zk, group)
        registered = readers(members, topic)
        made = Plan(secrets.token_hex(8), group, topic, rows, versions, registered)
        return self._plans.keep(made)

    def get(self, group: str, plan_id: str) -> Plan:
        """The plan of that id, made for ``group``.

        Raises:
            ConfigurationError: no such plan (stored already, or too old: plan again).
        """
        return self._plans.get(group, plan_id)

    async def store(self, zk: ZooKeeper, group: str, plan_id: str, *, force: bool) -> Plan:
        """Store the plan as it was shown, bumping each partition's fence.

        Raises:
            ConfigurationError: no such plan, or members registered that may read the topic
                and not ``force``.
            CoordinationError: an offset changed since the plan was made (nothing stored).
            AccessDeniedError: ZooKeeper's ACL refused the write.
        """
        plan = self.get(group, plan_id)
        layout = GroupLayout(group, plan.topic)
        members = await survey.read_members(zk, group)
        registered = readers(members, plan.topic)
        if registered and not force:
            raise ConfigurationError(
                f"refused: group {group!r} has {len(registered)} member(s) registered for "
                f"{plan.topic!r} ({', '.join(registered)}); they would overwrite the new "
                "offsets. Stop them first, or force it"
            )
        partitions = [row.partition for row in plan.rows]
        await looks.refusable(layout.offsets, survey.ensure_fences(zk, layout, partitions))
        offsets = {row.partition: row.new for row in plan.rows}
        writes: Mapping[GroupLayout, tuple[Mapping[int, int], Mapping[int, int]]] = {
            layout: (offsets, plan.versions)
        }
        if not await looks.refusable(layout.offsets, survey.write_offsets(zk, writes)):
            raise CoordinationError(
                f"the stored offsets of group {group!r} changed since the plan was made: "
                "nothing was stored; plan again"
            )
        self._plans.forget(plan_id)
        return plan
