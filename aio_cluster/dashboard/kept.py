"""The plans a dashboard made and has not written yet: each kept under its id until written,
the newest `KeptPlans.KEPT` only (a page that plans and never writes cannot grow the server)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, Protocol, TypeVar

from ..errors import ConfigurationError

__all__ = ["KeptPlans"]


class _Plan(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def group(self) -> str: ...


PlanT = TypeVar("PlanT", bound=_Plan)


class KeptPlans(Generic[PlanT]):
    """Plans by id, the newest `KEPT`; ``written`` says what writing one is called ("stored",
    "applied"), for the error that names a plan no longer kept."""

    KEPT = 16

    def __init__(self, written: str) -> None:
        self._written = written
        self._plans: OrderedDict[str, PlanT] = OrderedDict()

    def keep(self, plan: PlanT) -> PlanT:
        """Keep ``plan`` (forgetting the oldest beyond `KEPT`); returns it."""
        self._plans[plan.id] = plan
        while len(self._plans) > self.KEPT:
            self._plans.popitem(last=False)
        return plan

    def get(self, group: str, plan_id: str) -> PlanT:
        """The plan of that id, made for ``group``.

        Raises:
            ConfigurationError: no such plan (written already, or too old: plan again).
        """
        found = self._plans.get(plan_id)
        if found is None or found.group != group:
            raise ConfigurationError(
                f"no such plan ({self._written} already, or too old): plan again"
            )
        return found

    def forget(self, plan_id: str) -> None:
        """The plan was written: it cannot be written twice."""
        del self._plans[plan_id]
