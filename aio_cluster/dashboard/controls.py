"""An operator's pause, resume and skip made from the page: planned first (what the partition
is now: its owner, stored offset, log end, pause, stop, pending skip), shown, then written with
`aio_cluster.control.store.ControlStore`, only by a dashboard started with writes allowed (the
page's routes check the token, `aio_cluster.dashboard.app`).

A plan reads the group as ``aio-cluster skip`` does and writes nothing. Applying it reads the
partition's controls again and writes only if they are still what the plan showed (the pause,
the record it is stopped on, no skip pending); otherwise nothing is written and the page says to
plan again. The writes themselves are the store's, which fences a racing operator off.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, get_args

from ..control.model import format_at
from ..control.store import ControlStore
from ..errors import ConfigurationError, ControlConflictError, ControlError, SkipRefusedError
from ..kafka.offset_reader import OffsetReader
from ..operator import looks, survey
from ..operator.plans import LagRow
from ..zookeeper.client import ZooKeeper
from .kept import KeptPlans

__all__ = ["Act", "ControlPlan", "ControlPlans", "Request", "parse_request", "refusal"]

Act = Literal["pause", "resume", "skip"]
"""What a button of the partitions table asks for."""

_ACTS: dict[str, Act] = {act: act for act in get_args(Act)}


@dataclass(frozen=True)
class Request:
    """What a button asked: ``act`` on ``topic``/``partition``; a skip to ``to_offset``, or
    past the record the partition is stopped on where None."""

    act: Act
    topic: str
    partition: int
    to_offset: int | None = None


def parse_request(form: Mapping[str, str]) -> Request:
    """The request of the page's control form: the button pressed (``act`` is
    ``"<act>:<topic>:<partition>"``; a topic has no ``:``) and the skip's ``to_offset``.

    Raises:
        ConfigurationError: no such act, a partition or an offset that is not a number.
    """
    parts = form.get("act", "").split(":")
    if len(parts) != 3 or parts[0] not in _ACTS or not parts[1]:
        raise ConfigurationError(
            f"no such control {form.get('act', '')!r}; one of pause, resume, skip, on a partition"
        )
    act, topic, number = parts
    try:
        partition = int(number)
    except ValueError:
        raise ConfigurationError(f"partition {number!r} is not a number") from None
    to_offset = None
    text = form.get("to_offset", "").strip()
    if act == "skip" and text:
        try:
            to_offset = int(text)
        except ValueError:
            raise ConfigurationError(f"offset {text!r} is not a number") from None
        if to_offset < 0:
            raise ConfigurationError(f"an offset must not be negative, not {to_offset}")
    return Request(_ACTS[act], topic, partition, to_offset)


@dataclass(frozen=True)
class ControlPlan:
    """A pause, resume or skip shown on the page, not written yet.

    Attributes:
        id: names it in the form that applies it (not a secret: the token guards the write).
        group: the group's name.
        request: what was asked.
        row: the partition as the plan read it: owner, stored offset, log end, lag, and its
            controls (pause, stop, pending skip).
    """

    id: str
    group: str
    request: Request
    row: LagRow

    @property
    def target(self) -> int | None:
        """Where a skip moves the partition to: the offset asked, or just past the record it is
        stopped on; None for a pause or resume."""
        if self.request.act != "skip":
            return None
        if self.request.to_offset is not None:
            return self.request.to_offset
        return None if self.row.stopped is None else self.row.stopped.offset + 1


def refusal(request: Request, row: LagRow) -> ControlError | None:
    """Why ``request`` cannot be made on the partition as ``row`` shows it, or None where it
    can. Pure: the rules `ControlStore` applies when it writes, checked before
    a plan is shown, so that the page never offers what would be refused."""
    where = f"{request.topic}/{request.partition}"
    paused = row.paused
    if request.act == "pause" and paused is not None:
        return ControlConflictError(f"{where} is paused already ({_who(paused.by, paused.at)})")
    if request.act == "resume" and paused is None:
        return ControlConflictError(f"{where} is not paused by an operator: nothing to resume")
    if request.act != "skip":
        return None
    pending = row.skip
    if pending is not None:
        return ControlConflictError(
            f"a skip of {where} to offset {pending.target} is pending already "
            f"({_who(pending.by, pending.at)}): wait for its owner to apply it"
        )
    if row.owner is None:
        return SkipRefusedError(
            f"no member owns {where}: a skip is applied by the partition's owner; start one"
        )
    return _skip_target_refusal(request.to_offset, row, where)


def _skip_target_refusal(to_offset: int | None, row: LagRow, where: str) -> SkipRefusedError | None:
    """Why a skip cannot go to ``to_offset`` (None: past the record it is stopped on)."""
    stopped = row.stopped
    if to_offset is None:
        if stopped is None:
            return SkipRefusedError(
                f"{where} is not stopped on a record: give the offset to skip to"
            )
        return None
    floor = max(
        -1 if row.committed is None else row.committed, -1 if stopped is None else stopped.offset
    )
    if to_offset <= floor:
        return SkipRefusedError(
            f"a skip only moves forward: offset {to_offset} is not past {where}'s stored offset "
            f"({row.committed}) or the record it is stopped on; reset-offsets moves back"
        )
    if to_offset > row.end:
        return SkipRefusedError(f"offset {to_offset} is past {where}'s log end ({row.end})")
    return None


def _who(by: str, at: float) -> str:
    return f"by {by} at {format_at(at)}"


class ControlPlans:
    """The plans made from the page, kept until applied (the newest `KeptPlans.KEPT`)."""

    def __init__(self) -> None:
        self._plans: KeptPlans[ControlPlan] = KeptPlans("applied")

    async def plan(
        self, zk: ZooKeeper, kafka: OffsetReader, group: str, request: Request
    ) -> ControlPlan:
        """Plan ``request`` on ``group``: read the partition and its controls, refuse what
        cannot be done.

        Raises:
            ConfigurationError: no such group, a topic the group does not read, a partition
                the topic does not have.
            ControlError: what the request cannot do now (`refusal`).
        """
        await survey.require_group(zk, group)
        members = await survey.read_members(zk, group)
        if request.topic not in await survey.group_topics(zk, group, members.values()):
            raise ConfigurationError(f"group {group!r} does not read topic {request.topic!r}")
        _members, rows, _notes = await looks.look(zk, kafka, group, [request.topic])
        row = next((r for r in rows if r.partition == request.partition), None)
        if row is None:
            raise ConfigurationError(
                f"topic {request.topic!r} has no partition {request.partition} (it has {len(rows)})"
            )
        refused = refusal(request, row)
        if refused is not None:
            raise refused
        made = ControlPlan(secrets.token_hex(8), group, request, row)
        return self._plans.keep(made)

    def get(self, group: str, plan_id: str) -> ControlPlan:
        """The plan of that id, made for ``group``.

        Raises:
            ConfigurationError: no such plan (applied already, or too old: plan again).
        """
        return self._plans.get(group, plan_id)

    async def apply(self, zk: ZooKeeper, group: str, plan_id: str, by: str) -> str:
        """Write the plan as it was shown, by ``by``; returns what was written, in words (for
        the page and the log).

        Raises:
            ConfigurationError: no such plan.
            ControlConflictError: the partition's controls changed since the plan (nothing
                written), or another operator's write came first.
            SkipRefusedError: the store refused the skip.
        """
        plan = self.get(group, plan_id)
        request = plan.request
        key = (request.topic, request.partition)
        where = f"{request.topic}/{request.partition}"
        store = ControlStore(zk, group)
        now = await store.read()
        if now.paused.get(key) != plan.row.paused or (
            request.act == "skip" and (now.stopped.get(key) != plan.row.stopped or key in now.skips)
        ):
            raise ControlConflictError(
                f"the controls of {where} changed since the plan was made: nothing was "
                "written; plan again"
            )
        if request.act == "pause":
            if not await store.pause([key], by):
                raise ControlConflictError(f"{where} was paused meanwhile by another operator")
            done = f"paused {where} of group {group}"
        elif request.act == "resume":
            if not await store.resume([key], by):
                raise ControlConflictError(f"{where} was resumed meanwhile by another operator")
            done = f"resumed {where} of group {group}"
        else:
            skip = await store.request_skip(request.topic, request.partition, request.to_offset, by)
            done = f"asked the owner of {where} of group {group} to skip to offset {skip.target}"
        self._plans.forget(plan_id)
        return done
