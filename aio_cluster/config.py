"""A member's configuration in one place: frozen, typed value objects, in the manner of httpx's
``Timeout`` and ``Limits``. Each option is defined, checked and documented once, here; times are
in seconds everywhere. Pure: no I/O.

[ConsumerGroup][aio_cluster.ConsumerGroup] takes the objects (``timing=Timing(...)``) or builds
them from its keyword arguments of the same names (``session_timeout=30.0``; the fields of
`ZooKeeperSecurity` spelled ``zookeeper_auth``, ``zookeeper_acl``, ``zookeeper_tls``); giving
one object and keyword arguments of its fields too is an error naming the clash.
``ConsumerGroup.process()`` does the same with `Processing`. Every check raises
[ConfigurationError][aio_cluster.ConfigurationError] naming the option and the bad value, when
the object is made: before any connection.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal, TypedDict, TypeVar, cast

from .assign.strategies import Strategy
from .errors import ConfigurationError
from .kafka.decoding import Deserializer
from .kafka.fetcher import ISOLATION_LEVELS, IsolationLevel
from .kafka.options import KafkaOptions
from .zookeeper.layout import check_member_name
from .zookeeper.security import Acl, ZooKeeperTLS, checked_auth, default_acl

__all__ = [
    "FAILURES",
    "KAFKA_OFFSETS",
    "ORDERINGS",
    "Fetching",
    "KafkaOffsets",
    "Membership",
    "OnFailure",
    "Options",
    "Ordering",
    "ProcessOptions",
    "Processing",
    "Settings",
    "Timing",
    "ZooKeeperSecurity",
]

KafkaOffsets = Literal["off", "mirror", "migrate"]
KAFKA_OFFSETS: tuple[KafkaOffsets, ...] = ("off", "mirror", "migrate")
Ordering = Literal["key", "partition", "none"]
ORDERINGS: tuple[Ordering, ...] = ("key", "partition", "none")
OnFailure = Literal["dead_letter", "stop", "raise"]
FAILURES: tuple[OnFailure, ...] = ("dead_letter", "stop", "raise")
MAX_RACK = 255
"""The longest rack name a member takes: Kafka's fetch request carries it as a string of up
to 32,767 bytes, and no zone or rack name comes near this."""


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _positive(label: str, value: object) -> None:
    if not (_number(value) and cast(float, value) > 0):
        raise ConfigurationError(f"{label} must be positive, not {value!r}")


def _finite_positive(label: str, value: object) -> None:
    if not (_number(value) and math.isfinite(cast(float, value)) and cast(float, value) > 0):
        raise ConfigurationError(f"{label} must be a positive number of seconds, not {value!r}")


def _not_negative(label: str, value: object) -> None:
    if not (_number(value) and cast(float, value) >= 0):
        raise ConfigurationError(f"{label} must not be negative, not {value!r}")


def _count(label: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigurationError(f"{label} must be an integer of at least 1, not {value!r}")


def _seconds(label: str, value: object) -> None:
    if not (_number(value) and cast(float, value) >= 0):
        raise ConfigurationError(f"{label} must be a non-negative number, not {value!r}")


def _flag(label: str, value: object) -> None:
    if not isinstance(value, bool):
        raise ConfigurationError(f"{label} must be True or False, not {value!r}")


def _one_of(label: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigurationError(f"{label} {value!r} is not one of {', '.join(choices)}")


@dataclass(frozen=True, slots=True)
class Timing:
    """How long a member waits for what, and how often it does what; all in seconds.

    Attributes:
        session_timeout: the ZooKeeper session's timeout: how long after a member vanished
            (crash, network) its claims go and the group takes its partitions over. The server
            may clamp it to its own bounds.
        fetch_timeout: how long a member may fail to fetch a partition it owns (every request
            to its leader timed out or failed, or was refused) before it gives the partition
            up: it marks it unreadable in ZooKeeper after half this, and the group gives it to
            a member that can read it once the mark settled, after the other half.
            The session keeps a member's claims alive against ZooKeeper's silence; this keeps
            them alive against Kafka's. An empty answer to a long poll counts as progress, and
            a partition the member does not fetch (paused, or its batches still busy) is not
            measured. Nothing moves when no member can read the partition.
        request_timeout: the bound on each ZooKeeper request, the first connection included;
            one that takes longer raises [CoordinationTimeout][aio_cluster.CoordinationTimeout].
        claim_timeout: how long a claim waits for the partition's previous owner to release it;
            one that times out is logged and tried again a second later, while the rest of the
            rebalance goes on.
        rebalance_timeout: at a handover, the most time to wait for a partition's running batch
            body (then the partition is released without committing that batch, which its next
            owner gets again; a warning names member, partition and offset) and the bound on
            each listener call. With the sticky strategy also how long the published target may
            lag behind the registrations before a member other than the leader publishes it
            (the k-th oldest after k times this), so that a stuck leader cannot freeze joins.
        close_timeout: the bound on all of ``close()``: the listener's
            ``on_partitions_revoked``, the final commit and release, and closing the clients;
            what is not released by then goes with the ZooKeeper session.
        commit_interval: the most time a completed batch's offset waits before it is stored in
            ZooKeeper: what a crash may deliver again. A handover and ``close()`` store at once.
        metadata_interval: the time between checks of the topics' partitions (a change starts
            a rebalance), of whether a topic that does not exist yet does now, and of which
            topics a pattern matches.
        loop_delay: the pause after a fetch that failed (Kafka unreachable) before the next
            try; new claims or a close end it early. May be 0. A fetch that finds no record
            is not followed by a pause: it waited ``max_wait`` at the broker already.
        stuck_after: how long one attempt of a handler of ``process()`` (of a call of
            ``process_bulk()``; each retry starts the clock again, and the wait after a failure,
            a back-off or the dead letter's sending, is timed from the failure) or one batch body
            of ``async for`` (from its hand-out to its end) may run before the member counts as
            stuck (so a record retried with attempts bounded by ``attempt_timeout`` is not):
            named in ``statistics().stuck``, the metrics, ``aio-cluster describe``, the
            dashboard, and ``aio-cluster check``'s ``stuck`` verdict, and logged once. Nothing
            is cancelled for it (that is ``attempt_timeout``'s part); it only makes a hang
            visible.
    """

    session_timeout: float = 10.0
    fetch_timeout: float = 30.0
    request_timeout: float = 10.0
    claim_timeout: float = 30.0
    rebalance_timeout: float = 60.0
    close_timeout: float = 10.0
    commit_interval: float = 1.0
    metadata_interval: float = 5.0
    loop_delay: float = 1.0
    stuck_after: float = 60.0

    def __post_init__(self) -> None:
        for field in fields(self):
            if field.name != "loop_delay":
                _positive(field.name, getattr(self, field.name))
        _not_negative("loop_delay", self.loop_delay)


DEFAULT_BUFFERED_BYTES = 32 * 1024 * 1024
"""The default budget of buffered record bytes per member (`Fetching.max_buffered_bytes`)."""


@dataclass(frozen=True, slots=True)
class Fetching:
    """What a member fetches from Kafka, and how it hands the records out.

    Attributes:
        max_bytes: the most bytes fetched from one partition at a time: bounds a batch's size.
            A single larger record is still delivered, whole.
        max_buffered_bytes: the budget of record bytes the member buffers, shared over the
            partitions it owns (librdkafka's ``queued.max.messages.kbytes`` is the model), so
            that its memory does not grow with them. Each partition is still fetched in chunks
            of ``max_bytes``; a fetch response brings at most a quarter of the budget (over the
            brokers), no fetch goes out while the records buffered and not yet handed out plus
            one response per broker would pass the budget, and a partition with an eighth of
            the budget waiting is fetched no further until it is handed out (so that one slow
            partition cannot spend the budget of all). A paused partition buffers nothing (its
            records are read again when it resumes). Soft, as Kafka's own bounds: a broker
            returns the first record batch of a fetch whole, however small the bound. Counted
            as the bytes Kafka sends, not the batches handed out (a batch's records are the
            user's once handed out); the records as Python objects take somewhat more. None: no
            budget, only ``max_bytes`` per partition (memory then grows with the partitions
            owned).
        max_wait: how long the broker may wait for ``min_bytes`` before it answers a fetch, in
            seconds (``max_wait_ms``, in milliseconds, is deprecated). Kafka's own default:
            with ``min_bytes`` 1 the broker answers as soon as a record arrives, so a longer
            wait delays no record; it only makes an idle member ask less often (twice a second,
            each asking for every partition it owns). A partition claimed while a fetch waits
            at the broker is first fetched once that fetch is answered.
        min_bytes: the least data a fetch should return; the broker waits up to ``max_wait``.
        isolation_level: ``"read_uncommitted"`` (as Kafka's own consumer) hands out every
            record, those of aborted transactions too; ``"read_committed"`` hands out no record
            of an aborted transaction, and a transaction's records only once it committed.
        trail: where no offset is stored, start at the latest offset (skip what the topic holds
            already) instead of the earliest; the start is stored at once.
        key_deserializer: called on each record's key (bytes; a None key stays None); the
            batches hand out what it returns. One that raises makes the iteration raise
            [DeserializationError][aio_cluster.DeserializationError] for that record.
        value_deserializer: the same for each value (a None value, a tombstone, stays None).
    """

    max_bytes: int = 1_048_576
    max_buffered_bytes: int | None = DEFAULT_BUFFERED_BYTES
    max_wait: float = 0.5
    min_bytes: int = 1
    isolation_level: IsolationLevel = "read_uncommitted"
    trail: bool = False
    key_deserializer: Deserializer | None = None
    value_deserializer: Deserializer | None = None

    def __post_init__(self) -> None:
        _positive("max_bytes", self.max_bytes)
        budget: object = self.max_buffered_bytes  # a caller's value of any type
        if budget is not None and (
            not isinstance(budget, int) or isinstance(budget, bool) or budget <= 0
        ):
            raise ConfigurationError(
                f"max_buffered_bytes must be a positive integer (bytes) or None, not {budget!r}"
            )
        _positive("max_wait", self.max_wait)
        _not_negative("min_bytes", self.min_bytes)
        _one_of("isolation_level", self.isolation_level, ISOLATION_LEVELS)
        _flag("trail", self.trail)
        for label in ("key_deserializer", "value_deserializer"):
            deserializer = getattr(self, label)
            if deserializer is not None and not callable(deserializer):
                raise ConfigurationError(f"{label} must be callable, not {deserializer!r}")


@dataclass(frozen=True, slots=True)
class Membership:
    """How a member takes part in its group.

    Attributes:
        strategy: the assignment strategy (a [Strategy][aio_cluster.Strategy] or its value):
            ``"sticky"`` (the oldest member publishes a target that moves only what must move),
            ``"range"`` or ``"roundrobin"``. Every member of a group must use the same: a group
            still running range needs ``strategy="range"`` on new members. Kept as a Strategy.
        member_name: a name stable across the member's restarts (a StatefulSet pod's name,
            say), used as its member id and written into its registration: 1 to 249 of
            ``A-Z a-z 0-9 . _ -``. A member started under the name of a live member takes
            that member's registration and partitions over at once (a restart back before its
            old session expired), bumping their fences; the older member, if it still runs,
            stops with [MemberReplacedError][aio_cluster.MemberReplacedError] and never
            registers again on its own. Run one member per name.
            None: a unique id is made.
        rejoin_grace: with ``member_name`` and the sticky strategy, how many seconds the
            partitions of a member that left or died wait for it: back under the same name
            within it, it gets exactly its partitions back and no other member's move. They are
            not consumed meanwhile (Kafka's static membership makes the same trade); past it
            they are spread as at any leave. None or 0: no grace.
        rack: the rack (a cloud's availability zone) this member runs in, as the brokers'
            ``broker.rack`` name theirs: sent with every fetch, so that brokers with a
            rack-aware replica selector serve it from the replica in its rack, and published in
            its registration, so that the sticky target gives it, where the balance allows, the
            partitions with a replica in its rack (see the configuration guide). None: no rack.
        wait_for_topic: a topic that does not exist yet is waited for (logged once, checked
            every ``metadata_interval``); False makes ``register()`` fail instead.
        register: join on ``async with``; False leaves joining to ``await group.register()``.
        kafka_offsets: ``"mirror"`` also commits every offset stored in ZooKeeper to Kafka under
            the group's name, so that Kafka's own tools show the group and its lag (ZooKeeper
            stays the truth; a refused commit goes again with the next). ``"migrate"`` mirrors
            too, and starts a newly claimed partition where a Kafka group of the same name
            stopped, when that is further than the offset stored in ZooKeeper (or none is):
            moving from the Kafka group and back again never re-reads. Under ``"migrate"`` a
            reset of the ZooKeeper offsets alone does not take where Kafka's offset is further:
            reset both, or use ``"mirror"`` once the move is done. ``"off"``: neither.
        exactly_once: consume in the exactly-once mode (see the exactly-once guide): the
            output a batch or a record sends through its `Output` and the input offsets commit
            in one Kafka transaction per partition, through
            [transactions()][aio_cluster.ConsumerGroup.transactions] or
            [process_transactional()][aio_cluster.ConsumerGroup.process_transactional] only.
            The offsets committed in Kafka under the group's name are then the truth and the
            ZooKeeper offsets follow them, so it needs ``kafka_offsets="off"``.
    """

    strategy: Strategy | str = Strategy.STICKY
    member_name: str | None = None
    rejoin_grace: float | None = None
    rack: str | None = None
    wait_for_topic: bool = True
    register: bool = True
    kafka_offsets: KafkaOffsets = "off"
    exactly_once: bool = False

    def __post_init__(self) -> None:
        try:
            strategy = Strategy(self.strategy)
        except ValueError:
            known = ", ".join(s.value for s in Strategy)
            raise ConfigurationError(
                f"unknown strategy {self.strategy!r}; use one of {known}"
            ) from None
        object.__setattr__(self, "strategy", strategy)
        _flag("wait_for_topic", self.wait_for_topic)
        _flag("register", self.register)
        _one_of("kafka_offsets", self.kafka_offsets, KAFKA_OFFSETS)
        _flag("exactly_once", self.exactly_once)
        if self.exactly_once and self.kafka_offsets != "off":
            raise ConfigurationError(
                f"exactly_once cannot combine with kafka_offsets={self.kafka_offsets!r}: the "
                "offsets committed in the transactions are the group's Kafka offsets already, "
                "and a mirror's commits would race them"
            )
        if self.member_name is not None:
            check_member_name(self.member_name)
        rack: object = self.rack
        if rack is not None and not (
            isinstance(rack, str) and rack.strip() == rack and 0 < len(rack) <= MAX_RACK
        ):
            raise ConfigurationError(
                f"rack must be a non-empty string of at most {MAX_RACK} characters without "
                f"surrounding spaces (as the brokers' broker.rack names it), or None, "
                f"not {self.rack!r}"
            )
        grace: object = self.rejoin_grace
        if grace is None:
            return
        if not (_number(grace) and cast(float, grace) >= 0):
            raise ConfigurationError(
                f"rejoin_grace must be a non-negative number of seconds, not {grace!r}"
            )
        if grace and self.member_name is None:
            raise ConfigurationError(
                "rejoin_grace needs a member_name: a member comes back to its partitions under "
                "the same name"
            )
        if grace and strategy is not Strategy.STICKY:
            raise ConfigurationError(
                f"rejoin_grace needs the sticky strategy, not {strategy.value!r}: its "
                "published target is what keeps a member's partitions for it"
            )


@dataclass(frozen=True, slots=True)
class ZooKeeperSecurity:
    """How a member's ZooKeeper session proves who it is, whom its nodes belong to, and whether
    it speaks TLS. As keyword arguments of [ConsumerGroup][aio_cluster.ConsumerGroup] the
    fields are spelled ``zookeeper_auth``, ``zookeeper_acl`` and ``zookeeper_tls``.

    Attributes:
        auth: credentials of the session, ``[("digest", "user:password")]``; kept as a tuple.
        acl: ``"open"``: the group's nodes are open to all; ``"creator"``: the nodes this member
            creates (``ids``, ``owners``, ``offsets`` and their parents) may be changed only by
            the identity of ``auth``, and read by anyone. Nodes that exist keep their ACL.
        tls: speak TLS to ZooKeeper: True trusts the system's certificate authorities, a
            [ZooKeeperTLS][aio_cluster.ZooKeeperTLS] names a CA and a client certificate.
    """

    auth: Sequence[tuple[str, str]] = ()
    acl: Acl = "open"
    tls: ZooKeeperTLS | bool = False

    def __post_init__(self) -> None:
        auth = tuple(checked_auth(self.auth))
        object.__setattr__(self, "auth", auth)
        default_acl(self.acl, auth)
        if not isinstance(self.tls, (bool, ZooKeeperTLS)):
            raise ConfigurationError(
                f"zookeeper_tls must be True, False or a ZooKeeperTLS, not {self.tls!r}"
            )


@dataclass(frozen=True, slots=True)
class Processing:
    """How ``ConsumerGroup.process()`` runs its handler: checked before any record is taken.

    Attributes:
        concurrency: the most handlers running at once, over all partitions.
        ordering: ``"key"``: a key's records (within a partition) run one after another in
            offset order, other keys' side by side; records without a key count as one key.
            ``"partition"``: one record at a time per partition. ``"none"``: any.
        attempts: how often the handler runs for one record before it has failed for good.
        retry_initial: seconds before the first retry; each further retry waits twice as long.
        retry_max: the most seconds of a wait before its jitter.
        retry_jitter: up to this many random seconds added to each wait.
        on_failure: for a record that failed ``attempts`` times: ``"stop"`` pauses its
            partition (logged, and named in ``statistics()``), to be resumed once mended;
            ``"dead_letter"`` writes it to ``dead_letter_topic`` and goes on; ``"raise"`` ends
            the call with the handler's error.
        dead_letter_topic: the (existing) topic ``"dead_letter"`` writes failed records to;
            with ``"stop"``, where a record an operator skips (``aio-cluster skip``) goes.
        max_records: records taken and not finished beyond which no batch is taken (the fetch
            waits): with ``max_bytes`` per claimed partition, the memory bound.
        attempt_timeout: the most seconds one attempt of the handler may run (with
            ``process_bulk()``, one call of it); one running longer is cancelled and counts as
            a failed attempt (an [AttemptTimeoutError][aio_cluster.AttemptTimeoutError]): it is
            retried with the back-off, then ``on_failure`` decides. None (the default): no
            bound, so that a handler that never returns holds its key and its partition's
            stored offset until a handover or the close cancels it.
    """

    concurrency: int = 100
    ordering: Ordering = "key"
    attempts: int = 3
    retry_initial: float = 0.1
    retry_max: float = 10.0
    retry_jitter: float = 0.1
    on_failure: OnFailure = "stop"
    dead_letter_topic: str | None = None
    max_records: int = 10_000
    attempt_timeout: float | None = None

    def __post_init__(self) -> None:
        _count("concurrency", self.concurrency)
        if self.attempt_timeout is not None:
            _finite_positive("attempt_timeout", self.attempt_timeout)
        _count("attempts", self.attempts)
        _count("max_records", self.max_records)
        for label in ("retry_initial", "retry_max", "retry_jitter"):
            _seconds(label, getattr(self, label))
        if self.retry_initial > self.retry_max:
            raise ConfigurationError(
                f"retry_initial ({self.retry_initial}) must not exceed retry_max ({self.retry_max})"
            )
        if self.ordering not in ORDERINGS:
            raise ConfigurationError(
                f"unknown ordering {self.ordering!r}; use one of {', '.join(ORDERINGS)}"
            )
        if self.on_failure not in FAILURES:
            raise ConfigurationError(
                f"unknown on_failure {self.on_failure!r}; use one of {', '.join(FAILURES)}"
            )
        if self.on_failure == "dead_letter" and (
            not isinstance(self.dead_letter_topic, str) or not self.dead_letter_topic
        ):
            raise ConfigurationError(
                'on_failure="dead_letter" needs a dead_letter_topic, not '
                f"{self.dead_letter_topic!r}"
            )

    @classmethod
    def of(cls, processing: Processing | None, options: Mapping[str, object]) -> Processing:
        """The policy of a ``process()`` call: ``processing`` itself, or one made of its
        keyword arguments (not both).

        Raises:
            ConfigurationError: a bad value, or ``processing`` and keyword arguments both.
            TypeError: an unknown keyword argument.
        """
        rest = dict(options)
        policy = _gather(cls, processing, rest, "processing")
        _refuse_unknown("process", rest)
        return policy


class Options(TypedDict, total=False):
    """The keyword arguments of ``ConsumerGroup`` that build its configuration objects, typed for
    its overloads: each is the field of the same name of `Timing`, `Fetching` or `Membership`,
    or of `ZooKeeperSecurity` with ``zookeeper_`` before it, and defined, checked and documented
    there (``max_wait_ms`` is the deprecated `Fetching.max_wait` in milliseconds)."""

    session_timeout: float
    fetch_timeout: float
    request_timeout: float
    claim_timeout: float
    rebalance_timeout: float
    close_timeout: float
    commit_interval: float
    metadata_interval: float
    loop_delay: float
    stuck_after: float
    max_bytes: int
    max_buffered_bytes: int | None
    max_wait: float
    max_wait_ms: int
    min_bytes: int
    isolation_level: IsolationLevel
    trail: bool
    key_deserializer: Deserializer | None
    value_deserializer: Deserializer | None
    strategy: Strategy | str
    member_name: str | None
    rejoin_grace: float | None
    rack: str | None
    wait_for_topic: bool
    register: bool
    kafka_offsets: KafkaOffsets
    exactly_once: bool
    zookeeper_auth: Sequence[tuple[str, str]]
    zookeeper_acl: Acl
    zookeeper_tls: ZooKeeperTLS | bool


class ProcessOptions(TypedDict, total=False):
    """The keyword arguments of ``ConsumerGroup.process()``, typed: the fields of `Processing`."""

    concurrency: int
    ordering: Ordering
    attempts: int
    retry_initial: float
    retry_max: float
    retry_jitter: float
    on_failure: OnFailure
    dead_letter_topic: str | None
    max_records: int
    attempt_timeout: float | None


Config = TypeVar("Config", Timing, Fetching, Membership, ZooKeeperSecurity, Processing)


def _gather(
    kind: type[Config], given: object, options: dict[str, object], name: str, prefix: str = ""
) -> Config:
    """``given`` (checked to be a ``kind``), or a ``kind`` made of the keyword arguments that
    are its fields, each with ``prefix`` before its name (taken out of ``options``)."""
    picked = {
        field.name: options.pop(prefix + field.name)
        for field in fields(kind)
        if prefix + field.name in options
    }
    if given is None:
        return cast("Callable[..., Config]", kind)(**picked)
    if not isinstance(given, kind):
        raise ConfigurationError(f"{name} must be a {kind.__name__}, not {given!r}")
    if picked:
        clash = ", ".join(prefix + field for field in picked)
        raise ConfigurationError(
            f"{name}= and {clash}= both given: set {clash} in the {kind.__name__}, or drop {name}="
        )
    return given


def _refuse_unknown(function: str, rest: Mapping[str, object]) -> None:
    for name in rest:
        raise TypeError(f"{function}() got an unexpected keyword argument {name!r}")


def _deprecated_max_wait_ms(options: dict[str, object], fetching: Fetching | None) -> None:
    """``max_wait_ms`` (milliseconds) as ``max_wait`` (seconds), with a DeprecationWarning."""
    if "max_wait_ms" not in options:
        return
    value = options.pop("max_wait_ms")
    warnings.warn(
        f"max_wait_ms is deprecated: pass max_wait, in seconds (max_wait={value!r} / 1000)",
        DeprecationWarning,
        stacklevel=4,
    )
    for other, present in (("max_wait", options.get("max_wait")), ("fetching", fetching)):
        if present is not None:
            raise ConfigurationError(f"{other}= and max_wait_ms= both given: drop max_wait_ms=")
    if not (_number(value) and cast(float, value) > 0):
        raise ConfigurationError(f"max_wait_ms must be positive, not {value!r}")
    options["max_wait"] = cast(float, value) / 1000


@dataclass(frozen=True, slots=True)
class Settings:
    """A member's whole configuration: what `aio_cluster.member.member.Member` is built from.

    Attributes:
        timing: the times and intervals.
        fetching: the fetches and how records are handed out.
        membership: the member's part in the group.
        zookeeper: the ZooKeeper session's security.
        kafka: the Kafka clients' connection options.
    """

    timing: Timing
    fetching: Fetching
    membership: Membership
    zookeeper: ZooKeeperSecurity
    kafka: KafkaOptions

    @classmethod
    def of(
        cls,
        options: Mapping[str, object],
        *,
        timing: Timing | None = None,
        fetching: Fetching | None = None,
        membership: Membership | None = None,
        zookeeper_security: ZooKeeperSecurity | None = None,
        kafka_options: Mapping[str, Any] | None = None,
    ) -> Settings:
        """The configuration of a `ConsumerGroup`: the objects given, the others made of the
        keyword arguments ``options`` (``max_wait_ms`` taken as ``max_wait`` with a
        DeprecationWarning).

        Raises:
            ConfigurationError: a bad value (the message names it), or an object and keyword
                arguments of its fields both.
            TypeError: an unknown keyword argument.
        """
        rest = dict(options)
        _deprecated_max_wait_ms(rest, fetching)
        settings = cls(
            timing=_gather(Timing, timing, rest, "timing"),
            fetching=_gather(Fetching, fetching, rest, "fetching"),
            membership=_gather(Membership, membership, rest, "membership"),
            zookeeper=_gather(
                ZooKeeperSecurity, zookeeper_security, rest, "zookeeper_security", "zookeeper_"
            ),
            kafka=KafkaOptions(kafka_options or {}),
        )
        _refuse_unknown("ConsumerGroup", rest)
        return settings
