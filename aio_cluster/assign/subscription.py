"""Subscription: which topics a member reads, as its argument and its registration say. Pure.

A member reads one topic, a list of topics, or every topic of the cluster whose whole name a
regular expression matches (Kafka's ZooKeeper consumer's ``white_list``; the ``exclude`` pattern
is folded into it as a negative lookahead, so that the registration stays one classic regex that
every member, and Kafka's own tools, evaluate alike). A ``black_list`` registration written by
another classic consumer reads every topic its regex does not match. Kafka's internal topics
(``__consumer_offsets``, ``__transaction_state``) never match a pattern.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import ConfigurationError

__all__ = ["INTERNAL_TOPICS", "Subscription"]

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
"""Kafka's own topics: no pattern reads them."""

Kind = Literal["static", "white_list", "black_list"]


def _joined(include: str, exclude: str | None) -> str:
    """One regex for ``include`` without ``exclude`` (each matching a whole name)."""
    if exclude is None:
        return include
    return f"(?!(?:{exclude})$)(?:{include})"


def _compiled(text: str, label: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as exc:
        raise ConfigurationError(
            f"{label} {text!r} is not a valid regular expression: {exc}"
        ) from exc


@dataclass(frozen=True)
class Subscription:
    """What one member reads.

    Attributes:
        kind: ``"static"`` (the topics named), ``"white_list"`` (the topics ``regex`` matches)
            or ``"black_list"`` (the topics it does not match), as Kafka's ZooKeeper consumer
            recorded it.
        topics: the topics named (``"static"``), in the order given.
        regex: the whole-name regular expression of a pattern, as recorded.
        listed: the topics were given as a list (even of one): partitions are named by
            TopicPartition, as for a pattern.
    """

    kind: Kind
    topics: tuple[str, ...] = ()
    regex: str | None = None
    listed: bool = False

    @classmethod
    def of(cls, topic: object, exclude: object = None) -> Subscription:
        """The subscription a `ConsumerGroup` argument names.

        Args:
            topic: a topic name, a list or tuple of names, or a compiled `re.Pattern` of str.
            exclude: with a pattern, a compiled pattern of the topics not to read.

        Raises:
            ConfigurationError: an empty list, a duplicate name, an argument of another type, a
                pattern of bytes or with flags its text does not carry, or ``exclude`` without
                a pattern (topic names themselves are checked by the layout).
        """
        if isinstance(topic, re.Pattern):
            include = _pattern_text(topic, "topic pattern")
            excluded = None
            if exclude is not None:
                if not isinstance(exclude, re.Pattern):
                    raise ConfigurationError(
                        f"exclude must be a compiled re.Pattern, not {exclude!r}"
                    )
                excluded = _pattern_text(exclude, "exclude pattern")
            regex = _joined(include, excluded)
            _compiled(regex, "topic pattern")
            return cls(kind="white_list", regex=regex)
        if exclude is not None:
            raise ConfigurationError(
                f"exclude={exclude!r} needs a topic pattern (a compiled re.Pattern), not {topic!r}"
            )
        if isinstance(topic, str):
            return cls(kind="static", topics=(topic,))
        if isinstance(topic, (list, tuple)):
            if not topic:
                raise ConfigurationError("the list of topics is empty: name at least one")
            for name in topic:
                if not isinstance(name, str):
                    raise ConfigurationError(f"topic {name!r} in {topic!r} is not a str")
            seen: set[str] = set()
            for name in topic:
                if name in seen:
                    raise ConfigurationError(f"topic {name!r} is named twice in {topic!r}")
                seen.add(name)
            return cls(kind="static", topics=tuple(topic), listed=True)
        raise ConfigurationError(
            f"topic must be a topic name, a list of names or a compiled re.Pattern, not {topic!r}"
        )

    @classmethod
    def recorded(cls, kind: str, entries: Iterable[str]) -> Subscription:
        """The subscription a registration records (``pattern`` and ``subscription``): a
        pattern with an unreadable regex reads nothing; any other kind reads the topics named,
        as the single-topic releases read every registration."""
        names = tuple(entries)
        if kind in ("white_list", "black_list"):
            if len(names) != 1:
                return cls(kind="static")
            try:
                re.compile(names[0])
            except re.error:
                return cls(kind="static")
            return cls(kind="white_list" if kind == "white_list" else "black_list", regex=names[0])
        return cls(kind="static", topics=names)

    @property
    def many(self) -> bool:
        """Whether the member reads a list or a pattern (its keys are TopicPartitions)."""
        return self.kind != "static" or self.listed or len(self.topics) != 1

    @property
    def is_pattern(self) -> bool:
        """Whether the topics follow the cluster's."""
        return self.kind != "static"

    @property
    def entries(self) -> tuple[str, ...]:
        """The keys of the registration's ``subscription`` map."""
        return self.topics if self.regex is None else (self.regex,)

    def matches(self, topic: str) -> bool:
        """Whether this subscription reads ``topic``."""
        if self.regex is None:
            return topic in self.topics
        if topic in INTERNAL_TOPICS:
            return False
        found = re.fullmatch(self.regex, topic) is not None
        return found if self.kind == "white_list" else not found

    def select(self, existing: Iterable[str]) -> list[str]:
        """The topics read, given the cluster's ``existing`` topics: a static list reads its
        topics whether they exist or not (in its order); a pattern the matching ones, sorted."""
        if self.regex is None:
            return list(self.topics)
        return sorted({topic for topic in existing if self.matches(topic)})


def _pattern_text(pattern: re.Pattern[Any], label: str) -> str:
    """The text of a compiled pattern that, compiled again, means the same."""
    text = pattern.pattern
    if not isinstance(text, str):
        raise ConfigurationError(f"{label} {pattern!r} must be a str pattern, not bytes")
    if _compiled(text, label).flags != pattern.flags:
        raise ConfigurationError(
            f"{label} {pattern!r} has flags its text does not carry: write them inline, "
            "e.g. re.compile('(?i)events\\..*'), so that every member reads the same rule"
        )
    return text
