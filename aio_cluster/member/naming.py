"""PartitionNames: the partitions as a member's user names them, turned into keys and back.

A member's parts know a partition by its key (`aio_cluster.kafka.topics.PartitionKey`); its user
names it by an ``int`` (a member of one topic) or a `TopicPartition` (a member of a list or a
pattern). This is the one place that translates, so the facade only passes names through, and a
name of the wrong form is refused here with a message that says which form the member takes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, cast

from ..assign.subscription import Subscription
from ..errors import ConfigurationError, NotOwnedError
from ..kafka.topics import PartitionKey, PartitionT
from .protocol.keyed_layout import KeyedLayout

__all__ = ["UNKNOWN", "PartitionNames"]

UNKNOWN = PartitionKey(-1)
"""The key of a partition of a topic the member never reads: no claim ever holds it."""


class PartitionNames(Generic[PartitionT]):
    """The user's names of one member's partitions (pure: no server is asked)."""

    def __init__(self, layout: KeyedLayout, subscription: Subscription) -> None:
        """Args:
        layout: the member's layout, which numbers its topics.
        subscription: what the member reads (a name of a topic it reads but has not met yet
            gets a key; others get `UNKNOWN`).
        """
        self._layout = layout
        self._subscription = subscription

    def name(self, key: PartitionKey) -> PartitionT:
        """How the user knows the partition of ``key``."""
        return cast(PartitionT, self._layout.name(key))

    def names(self, keys: Iterable[PartitionKey]) -> list[PartitionT]:
        """The user's names of ``keys``, sorted."""
        return cast("list[PartitionT]", sorted(self._layout.name(key) for key in keys))

    def key(self, partition: PartitionT) -> PartitionKey:
        """The key of a partition the user names; `UNKNOWN` for a partition of a topic this
        member does not read, or a negative partition.

        Raises:
            ConfigurationError: the name has the wrong form for this member.
        """
        given: object = partition
        if not self._subscription.many:
            if isinstance(given, int) and not isinstance(given, bool):
                # A one-topic member's keys are its partition ids.
                return PartitionKey(given) if given >= 0 else UNKNOWN
            raise ConfigurationError(
                f"partition {given!r}: a member on one topic names a partition by its id (int)"
            )
        if (
            isinstance(given, tuple)
            and len(given) == 2
            and isinstance(given[0], str)
            and isinstance(given[1], int)
            and not isinstance(given[1], bool)
        ):
            topic, number = given
            keys = self._layout.keys
            found = keys.lookup(topic, number)
            if found is None and self._subscription.matches(topic):
                self._layout.of(topic)  # a name the layout takes (else ConfigurationError)
                found = keys.key(topic, number)  # a topic read, not met yet
            return UNKNOWN if found is None or number < 0 else found
        raise ConfigurationError(
            f"partition {given!r}: a member on many topics names a partition by "
            "TopicPartition(topic, partition)"
        )

    def not_owned(self, partition: PartitionT, member: str, why: str = "") -> NotOwnedError:
        """The error for a call on a partition ``member`` does not own; ``why`` adds a reason."""
        if self._subscription.many:
            named = f"partition {partition!r}"
        else:
            named = f"partition {partition} of {self._subscription.topics[0]!r}"
        return NotOwnedError(f"{named} is not owned by member {member}{why}")
