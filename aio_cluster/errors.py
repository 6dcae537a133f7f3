"""The errors aio_cluster raises.

Every error derives from [AioClusterError][aio_cluster.AioClusterError], so one
``except AioClusterError`` catches all of them. Errors of the third-party clients (kazoo, aiokafka)
are translated where they enter the library, with the original kept as ``__cause__``. The
errors marked *internal* are handled inside the library (a server's answer it acts on: a node
that exists, a stale version, an offset the broker no longer holds; or a bug check); they are
here so that every error the package raises has its place in the tree, and should one ever
reach a caller, an ``except`` of its parent catches it::

    AioClusterError                 root; ``retriable`` says whether trying again may help
    ├── ConfigurationError          bad input: an argument, an environment variable, a topic name
    │   └── TransactionDeniedError  exactly once: Kafka's ACLs refuse the transactional ids or group
    ├── LocalClusterError           the local ZooKeeper + Kafka could not be started or stopped
    ├── CoordinationError           ZooKeeper did not do what was asked (retriable)
    │   ├── CoordinationTimeout     a ZooKeeper call took longer than its bound
    │   ├── SessionLostError        the ZooKeeper session expired: every claim is gone
    │   ├── CorruptOffsetError      an offset node holds no offset (not retriable: reset it)
    │   ├── NodeExistsError         internal: the node to create exists already
    │   ├── NoNodeError             internal: the node (or a create's parent) does not exist
    │   └── BadVersionError         internal: a conditional write found another version
    ├── StrategyMismatchError       the group's members use another assignment strategy
    ├── MemberReplacedError         a newer member took this named member's name and partitions
    ├── NotOwnedError               commit, pause or seek of a partition this member does not own
    ├── ControlError                an operator's pause, resume or skip was not written
    │   ├── ControlConflictError    another operator's write came first: nothing changed
    │   └── SkipRefusedError        the skip cannot be applied (backwards, nobody owns it, ...)
    ├── AuthenticationError         a server refused the TLS handshake or the credentials
    ├── AccessDeniedError           ZooKeeper refused a change: the node's ACL does not grant it
    ├── GroupClosedError            the ConsumerGroup was used after close()
    ├── HandlerCancelledError       a handler raised CancelledError nobody asked for: it failed
    ├── IllegalTransition           internal: a partition state change it does not allow (a bug)
    ├── BrokerError                 Kafka did not answer as expected (retriable)
    │   └── OffsetsOutOfRange       internal: positions the broker no longer holds
    ├── FetchError                  records of a partition cannot be read: retrying cannot mend it
    │   ├── DeserializationError    the key or value deserializer refused a record
    │   └── ReadRefusedError        the partition's leader refused to let the member read it
    ├── FetchStalledError           Kafka fetching kept dying: the member gave its partitions up
    ├── UnreadableError             partitions this member could not read for fetch_timeout
    ├── BackgroundEndedError        a background loop of the member ended unasked: it failed
    ├── AttemptTimeoutError         a handler's attempt ran past attempt_timeout: it was cancelled
    ├── ProducerFencedError         exactly once: a newer owner fenced this partition's producer
    ├── OutputRefusedError          exactly once: Kafka refused an output; its input is uncommitted
    └── TransactionClosedError      exactly once: an Output used after its batch or record ended
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "AccessDeniedError",
    "AioClusterError",
    "AttemptTimeoutError",
    "AuthenticationError",
    "BackgroundEndedError",
    "BadVersionError",
    "BrokerError",
    "ConfigurationError",
    "ControlConflictError",
    "ControlError",
    "CoordinationError",
    "CoordinationTimeout",
    "CorruptOffsetError",
    "DeserializationError",
    "FetchError",
    "FetchStalledError",
    "GroupClosedError",
    "HandlerCancelledError",
    "IllegalTransition",
    "LocalClusterError",
    "MemberReplacedError",
    "NoNodeError",
    "NodeExistsError",
    "NotOwnedError",
    "OffsetsOutOfRange",
    "OutputRefusedError",
    "ProducerFencedError",
    "ReadRefusedError",
    "SessionLostError",
    "SkipRefusedError",
    "StrategyMismatchError",
    "TransactionClosedError",
    "TransactionDeniedError",
    "UnreadableError",
]


class AioClusterError(Exception):
    """The root of every error aio_cluster raises.

    Attributes:
        retriable: True when the same call may succeed later without any change by the caller.
    """

    retriable: bool = False


class ConfigurationError(AioClusterError, ValueError):
    """An argument, environment variable or name was not valid; the message names it."""


class TransactionDeniedError(ConfigurationError):
    """Exactly once (``exactly_once=True``): Kafka's ACLs do not grant this member's principal
    what the mode needs: ``Write`` and ``Describe`` on the partitions' transactional ids (the
    prefix ``aio-cluster.<group>.``), or ``Read`` and ``Describe`` on the group (its offsets
    commit in the transactions). Not retriable: grant them (the message names which), then
    start the member again."""


class LocalClusterError(AioClusterError):
    """The local single-node ZooKeeper + Kafka could not be started, reached or stopped."""


class CoordinationError(AioClusterError):
    """ZooKeeper could not complete a request (connection lost, unexpected node state)."""

    retriable = True


class CoordinationTimeout(CoordinationError):
    """A ZooKeeper request did not finish within its bound.

    A partition claim that waits too long raises nothing: it is retried (see ``claim_timeout``).
    """


class SessionLostError(CoordinationError):
    """The ZooKeeper session expired; every ephemeral node of it, and so every claim, is gone."""


class CorruptOffsetError(CoordinationError):
    """A stored offset node holds something other than a decimal offset.

    Trying again cannot help: the offset must be reset (``aio-cluster reset-offsets``).

    Attributes:
        path: the offset node.
        data: what it holds.
    """

    retriable = False

    def __init__(self, path: str, data: bytes) -> None:
        super().__init__(
            f"offset node {path} holds {data[:40]!r}, not a decimal offset; reset the offset"
        )
        self.path = path
        self.data = data


class NodeExistsError(CoordinationError):
    """The node to create exists already (internal: the library acts on this answer)."""

    retriable = False


class NoNodeError(CoordinationError):
    """The node (or, for a create, its parent) does not exist (internal: the library acts on
    this answer)."""

    retriable = False


class BadVersionError(CoordinationError):
    """A conditional write found the node at another version, or gone (internal: the library
    acts on this answer)."""

    retriable = False


class StrategyMismatchError(AioClusterError):
    """The group's live members publish another assignment strategy than this member's."""


class MemberReplacedError(AioClusterError):
    """Another member registered under this member's ``member_name`` and took over its
    partitions (a restart came back while this one still ran). This member stops and never
    registers again on its own: the newer member is the name's owner now. Not retriable.

    Attributes:
        name: the member name taken over.
    """

    retriable = False

    def __init__(self, group: str, name: str) -> None:
        super().__init__(
            f"member {name!r} of group {group!r} was taken over by a newer member registered "
            "under the same name; this one stops (run one member per name)"
        )
        self.name = name


class NotOwnedError(AioClusterError):
    """A commit, pause or seek named a partition this member does not own (never claimed, or
    handed over meanwhile). `resume()` ignores partitions it does not own."""


class ControlError(AioClusterError):
    """An operator's pause, resume or skip of a group's partitions (``aio-cluster pause``,
    the dashboard) was not written; the message says why. Nothing was changed."""


class ControlConflictError(ControlError):
    """Another operator's write came first (a skip pending for the partition already, a pause
    or resume racing this one): nothing was changed; look at the group again and decide."""


class SkipRefusedError(ControlError):
    """A skip that cannot be applied: backwards (at or before the stored offset), on a
    partition no member owns, or past "the record it is stopped on" when it is not stopped."""


class AuthenticationError(AioClusterError):
    """A server refused the connection's security: the TLS handshake failed (a certificate not
    trusted, a server that expects TLS spoken to in plaintext or the reverse), or the credentials
    were refused. The message names the server, never the secret. Trying again without changing
    the configuration does not help."""


class AccessDeniedError(AioClusterError):
    """ZooKeeper refused an operation on a node whose ACL does not grant it to this session's
    credentials (another identity created the group's nodes). The message names the node."""


class GroupClosedError(AioClusterError):
    """The ConsumerGroup was used after it was closed."""


class HandlerCancelledError(AioClusterError):
    """A handler of ``process()`` or ``process_bulk()`` raised ``CancelledError`` while nothing
    cancelled it (a library's cancellation leaking out of it, say): the attempt failed, and is
    retried and meets ``on_failure`` like any failure, rather than ending the call quietly or
    counting its records as finished. The ``CancelledError`` is its ``__cause__``."""


class IllegalTransition(AioClusterError):
    """A part of the member asked for a transition the state of the partition does not allow:
    a bug in the library (internal: `aio_cluster.member.delivery.partitions` raises it)."""


class BrokerError(AioClusterError):
    """Kafka did not answer as expected (an unreachable broker, a failed request, a protocol
    error). A topic that does not exist is a
    [ConfigurationError][aio_cluster.ConfigurationError]."""

    retriable = True


class OffsetsOutOfRange(BrokerError):
    """The positions of some partitions are outside what the broker holds (retention deleted
    them, or the topic was recreated). Internal: the member moves those partitions back within
    the log and fetches on.

    Attributes:
        partitions: the partition keys concerned, with the offset that was asked for.
    """

    retriable = False

    def __init__(self, partitions: Mapping[int, int]) -> None:
        super().__init__(f"offsets out of range: {dict(partitions)}")
        self.partitions = dict(partitions)


class FetchError(AioClusterError):
    """Records of a partition cannot be read, and fetching again will not mend it: a batch
    compressed with a codec this machine cannot decode, a corrupt record batch, a topic this
    member is not authorized to read.

    The iteration raises it; nothing at or past ``offset`` is handed out or committed. The member
    stays joined: after a `seek()` past the record (or once the cause is mended) iterating again
    goes on.

    Attributes:
        topic: the topic.
        partition: the partition.
        offset: the first offset that cannot be read (records before it were handed out).
    """

    def __init__(self, topic: str, partition: int, offset: int, reason: str) -> None:
        super().__init__(f"cannot read {topic}/{partition} at offset {offset}: {reason}")
        self.topic = topic
        self.partition = partition
        self.offset = offset


class DeserializationError(FetchError):
    """The ``key_deserializer`` or ``value_deserializer`` raised on a record.

    The record is not handed out and nothing is committed past it; `seek()` to ``offset + 1``
    skips it (after sending the raw bytes on, to a dead-letter topic say). The deserializer's
    exception is the ``__cause__``.

    Attributes:
        key: the record's raw key.
        value: the record's raw value.
        field: ``"key"`` or ``"value"``: which deserializer raised.
    """

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        key: bytes | None,
        value: bytes | None,
        field: str,
        reason: str,
    ) -> None:
        super().__init__(topic, partition, offset, f"the {field} deserializer raised {reason}")
        self.key = key
        self.value = value
        self.field = field


class ReadRefusedError(FetchError):
    """The leader of a partition refused to let this member read it (Kafka's
    ``TOPIC_AUTHORIZATION_FAILED``: its principal lost the topic's Read ACL, its credentials were
    rotated to another principal).

    The iteration and `process()` raise it, as any `FetchError`; the member stays joined. A
    member that keeps asking for the partition (iterating again) makes no progress reading it,
    so after ``fetch_timeout`` it marks it unreadable and the group gives it to a member that
    can read it (docs/operating.md, "A member that cannot read Kafka"); once the ACL is back it
    reads on.

    Attributes:
        broker: the node id of the leader that refused (None: not known).
        error: Kafka's error, by name.
    """

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        reason: str,
        *,
        broker: int | None,
        error: str,
    ) -> None:
        where = "its leader" if broker is None else f"broker {broker}"
        super().__init__(topic, partition, offset, f"{reason}, refused by {where} ({error})")
        self.broker = broker
        self.error = error


class UnreadableError(AioClusterError):
    """This member made no progress reading partitions it owns for longer than
    ``fetch_timeout`` (their leader does not answer, or answers each fetch with an error), and
    marked them unreadable: the group gives them to members that can read them.

    Not raised, since the member goes on with what it can read: given to
    `RebalanceListener.on_partitions_unreadable` once per change of state, and its text is
    ``statistics().unreadable_error`` (see docs/operating.md, "A member that cannot read
    Kafka").

    Attributes:
        broker: the node id of the partitions' leader as the member knew it (None: unknown).
        error: the last fetch error seen, or a timeout's description.
        since: the last progress reading them (Unix seconds).
    """

    def __init__(self, member: str, broker: int | None, error: str, since: float) -> None:
        where = "their leader" if broker is None else f"broker {broker}"
        super().__init__(f"member {member} cannot read from {where}: {error}")
        self.broker = broker
        self.error = error
        self.since = since


class FetchStalledError(AioClusterError):
    """The member's Kafka fetching stopped again and again: aiokafka's background fetch ended
    (an error in it ends it for good) more often than the member starts it again within a few
    minutes (see `aio_cluster.kafka.fetcher`). The iteration and `process()` raise it, and the
    member leaves the group, so that its partitions go to members that can read them. The
    cause of the last end is the ``__cause__``.
    """


class BackgroundEndedError(AioClusterError):
    """A background loop of the member (its rebalances, offset stores, metadata checks, mirror,
    liveness or controls) ended although the member was not closing: it returned, or a
    cancellation nobody asked for ended it (one escaping a library's ``gather()``, say). A loop
    that ends is never taken for a normal end: the member fails with this error, which the
    iteration and ``process()`` raise, and leaves the group, so that its partitions go to the
    others. The cancellation, if one ended it, is the ``__cause__``.

    Attributes:
        loop: the name of the loop that ended (``"rebalances"``, ``"liveness"``, ...).
    """

    def __init__(self, message: str, loop: str) -> None:
        super().__init__(message)
        self.loop = loop


class AttemptTimeoutError(AioClusterError, TimeoutError):
    """One attempt of a ``process()`` handler (of a ``process_bulk()`` call) ran longer than
    ``attempt_timeout`` and was cancelled. It is the attempt's failure: retried with the
    back-off, then handed to ``on_failure`` (a dead letter's ``aio-cluster.dlt.error.type``
    names it; ``"raise"`` ends the call with it).

    Attributes:
        timeout: the bound it ran past, in seconds.
    """

    def __init__(self, message: str, timeout: float) -> None:
        super().__init__(message)
        self.timeout = timeout


class ProducerFencedError(AioClusterError):
    """Exactly once (``exactly_once=True``): a newer owner of the partition initialised its
    transactional producer, which fenced this member's: this member's transaction of the
    partition is aborted, its output never visible to ``read_committed`` readers. The member
    has given the partition up and consumes on with the others; the new owner handles the
    records again from the offset committed last.

    Attributes:
        partition: the partition's key (its id, for a member of one topic).
    """

    retriable = False

    def __init__(self, message: str, partition: int) -> None:
        super().__init__(message)
        self.partition = partition


class OutputRefusedError(AioClusterError):
    """Exactly once (``exactly_once=True``): Kafka refused a record an input's handler or batch
    body sent (a record without a key to a compacted topic, one larger than the topic allows,
    a topic the principal may not write): the transaction that carried it is aborted, so
    neither that output nor the input's offset is committed. ``transactions()`` raises it; under
    ``process_transactional()`` it is the record's error, an attempt that failed, for its
    ``on_failure`` to decide.

    Kafka refuses a whole record batch for one bad record, so outputs of other inputs may have
    been refused with it: those are committed again on their own.

    Attributes:
        partition: the input partition's key (its id, for a member of one topic).
        offset: the input's offset (a batch's first offset under ``transactions()``).
        topic: the topic the refused output was sent to.
        error: the broker's error, as aiokafka reported it.
    """

    retriable = False

    def __init__(
        self, message: str, partition: int, offset: int, topic: str, error: BaseException
    ) -> None:
        super().__init__(message)
        self.partition = partition
        self.offset = offset
        self.topic = topic
        self.error = error


class TransactionClosedError(AioClusterError):
    """Exactly once: an [Output][aio_cluster.Output] was used after its batch's body (or its
    record's handler) ended: what it sends now would belong to no transaction."""

    retriable = False
