"""The ZooKeeper layout of a consumer group, and the data kept in it: pure, no I/O.

The layout is the classic one of Kafka's ZooKeeper consumer, so other tools (Burrow, old Kafka
scripts) can read it::

    /consumers/<group>/ids/<member-id>             ephemeral, the member's registration (JSON)
    /consumers/<group>/owners/<topic>/<partition>  ephemeral, the claim: the owner's member id
    /consumers/<group>/offsets/<topic>/<partition> persistent, the next offset, decimal text

The sticky strategy adds one node per topic, beside them, that classic tools ignore::

    /consumers/<group>/assignment/<topic>          persistent, the published target (JSON)
    /consumers/<group>/shares/<topic>/<member-id>  persistent, one member's share of it (JSON)
    /consumers/<group>/roster                      persistent, the registrations the leader
                                                   last read (`aio_cluster.zookeeper.roster`)

A member that cannot read partitions it owns (see `aio_cluster.assign.marks`) says so, in a
node of its own session that classic tools ignore; it exists only while the member is marked::

    /consumers/<group>/unreadable/<member-id>      ephemeral, JSON {"since","error","reads",
                                                   "at","settle","partitions": {topic:
                                                   {partition: leader}}}

And every claim bumps its partition's fence, which classic tools ignore too::

    /consumers/<group>/fences/<topic>/<partition>  persistent, its version is the claim's epoch

And where a batch ended unfinished, the records that finished past the stored offset, written
with that offset (`aio_cluster.member.delivery.finished`), which classic tools ignore as well::

    /consumers/<group>/finished/<topic>/<partition>  persistent, the records finished past it

A claim creates the owner node and bumps the fence's version in one transaction; that version is
the claim's epoch, one no earlier claim of the partition had. Every offset write and every release
checks it in the same transaction as the write, so a member whose claim is gone (its session
expired, its node was replaced, its request was queued across a reconnect) can never store an
offset or delete a node of that partition again. ``aio-cluster reset-offsets --execute`` bumps
the fences it writes under, which fences off every claim made before it.

An operator's control of a running group (`aio_cluster.control`) lives beside them too, and
classic tools ignore it::

    /consumers/<group>/control/paused/<topic>/<partition>   persistent, JSON {"by","at"}: paused
    /consumers/<group>/control/skips/<topic>/<partition>    persistent, JSON {"to","stopped_on",
                                                            "by","at"}: a skip not applied yet
    /consumers/<group>/control/stopped/<topic>/<partition>  ephemeral (the owner's session), JSON
                                                            {"member","offset","error","at"}: the
                                                            record on_failure="stop" stopped on
    /consumers/<group>/control/stuck/<topic>/<partition>/<member>
                                                            ephemeral (the member's session), JSON
                                                            {"member","kind","offset","since"}:
                                                            a handler or batch body running past
                                                            stuck_after in that member
    /consumers/<group>/control/history/entry-<seq>          persistent sequential, JSON: the last
                                                            100 control events

This module is the only place that spells these paths: the group's own nodes come from
`group_path` and its siblings, a topic's from `GroupLayout`; the member (by partition key) and
the command build on them.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass

from ..assign.marks import Mark
from ..assign.shares import SHARES_PROTOCOL, Share
from ..assign.strategies import Strategy
from ..assign.subscription import Subscription
from ..assign.target import StickyTarget
from ..errors import ConfigurationError, CoordinationError, CorruptOffsetError

__all__ = [
    "PARTITION_ID_MAX",
    "ROOT",
    "GroupLayout",
    "Registration",
    "check_member_name",
    "check_name",
    "control_path",
    "decode_mark",
    "decode_offset",
    "decode_registration",
    "decode_share",
    "decode_target",
    "decode_target_node",
    "encode_mark",
    "encode_registration",
    "encode_share",
    "encode_target",
    "group_path",
    "history_path",
    "ids_path",
    "mark_path",
    "marks_path",
    "member_path",
    "offsets_path",
    "owners_path",
    "partition_named",
    "paused_path",
    "roster_path",
    "skips_path",
    "stopped_path",
    "stuck_path",
    "topic_name",
]

# Kafka's own rule for topic names; group names get the same so that every path stays one segment.
_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


def check_name(kind: str, name: object) -> None:
    """Check a group or topic name against Kafka's rule for topic names.

    Raises:
        ConfigurationError: the name is not valid (named in the message).
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name in {".", ".."}:
        raise ConfigurationError(
            f"{kind} name {name!r} is not valid: use 1 to 249 of the characters A-Z a-z 0-9 . _ -"
        )


def topic_name(name: str) -> bool:
    """Whether ``name`` can be a topic (Kafka's rule): a subscription's or a ZooKeeper node's
    name that cannot is no topic to look up."""
    try:
        check_name("topic", name)
    except ConfigurationError:
        return False
    return True


PARTITION_ID_MAX = 2**31 - 1
"""The largest partition id Kafka has (an int32)."""


def partition_named(name: str) -> int | None:
    """The partition a numbered node stands for (an owner, offset or control node, named
    ``str(partition)``), or None for a name no writer of ours makes, which the reader names as
    unreadable and leaves out: anything but ASCII digits without a leading zero, up to
    `PARTITION_ID_MAX`.

    `str.isdigit()` is not the test: it takes ``"²"``, which `int()` refuses, and ``"\u0661"``
    (ARABIC-INDIC DIGIT ONE), which `int()` reads as 1 (a pause that ``resume`` of partition 1,
    deleting ``.../1``, would never lift); ``"01"`` would read as 1 the same way.
    """
    if not (0 < len(name) <= len(str(PARTITION_ID_MAX)) and name.isascii() and name.isdigit()):
        return None
    if name != "0" and name.startswith("0"):
        return None
    partition = int(name)
    return partition if partition <= PARTITION_ID_MAX else None


ROOT = "/consumers"
"""The parent of every group's nodes, shared with other groups (and other tools' consumers)."""


def group_path(group: str) -> str:
    """A group's node, the parent of all of its nodes."""
    return f"{ROOT}/{group}"


def ids_path(group: str) -> str:
    """The parent of a group's member registrations."""
    return f"{group_path(group)}/ids"


def member_path(group: str, member_id: str) -> str:
    """A member's registration node."""
    return f"{ids_path(group)}/{member_id}"


def marks_path(group: str) -> str:
    """The parent of a group's marks: one ephemeral child per member that cannot read."""
    return f"{group_path(group)}/unreadable"


def mark_path(group: str, member_id: str) -> str:
    """A member's mark (see `encode_mark`)."""
    return f"{marks_path(group)}/{member_id}"


def owners_path(group: str) -> str:
    """The parent of a group's claims: one child per topic, its partitions' owner nodes below."""
    return f"{group_path(group)}/owners"


def offsets_path(group: str) -> str:
    """The parent of a group's stored offsets: one child per topic, its partitions below."""
    return f"{group_path(group)}/offsets"


def roster_path(group: str) -> str:
    """A group's roster: the registrations its sticky leader last read, for newcomers."""
    return f"{group_path(group)}/roster"


def control_path(group: str) -> str:
    """The parent of a group's operator control: pauses, skips, stops and their history."""
    return f"{group_path(group)}/control"


def paused_path(group: str) -> str:
    """The parent of a group's operator pauses: one child per topic, its partitions below."""
    return f"{control_path(group)}/paused"


def skips_path(group: str) -> str:
    """The parent of a group's pending skips: one child per topic, its partitions below."""
    return f"{control_path(group)}/skips"


def stopped_path(group: str) -> str:
    """The parent of a group's stopped partitions: one child per topic, its partitions below."""
    return f"{control_path(group)}/stopped"


def stuck_path(group: str) -> str:
    """The parent of a group's stuck partitions (a handler or batch body running past
    ``stuck_after``): one child per topic, its partitions below."""
    return f"{control_path(group)}/stuck"


def history_path(group: str) -> str:
    """The parent of a group's control history: sequential ``entry-`` children."""
    return f"{control_path(group)}/history"


@dataclass(frozen=True)
class GroupLayout:
    """The paths of one group's coordination nodes for one topic (the group's own nodes, by
    the functions above; names checked)."""

    group: str
    topic: str

    def __post_init__(self) -> None:
        check_name("group", self.group)
        check_name("topic", self.topic)

    @property
    def ids(self) -> str:
        """The parent of the members' registrations."""
        return ids_path(self.group)

    @property
    def owners(self) -> str:
        """The parent of this topic's claims."""
        return f"{owners_path(self.group)}/{self.topic}"

    @property
    def offsets(self) -> str:
        """The parent of this topic's stored offsets."""
        return f"{offsets_path(self.group)}/{self.topic}"

    @property
    def assignment(self) -> str:
        """This topic's published sticky target (see `aio_cluster.assign.target`)."""
        return f"{group_path(self.group)}/assignment/{self.topic}"

    @property
    def shares(self) -> str:
        """The parent of this topic's share nodes (see `aio_cluster.assign.shares`)."""
        return f"{group_path(self.group)}/shares/{self.topic}"

    def share(self, member_id: str) -> str:
        """A member's share of this topic's published target."""
        return f"{self.shares}/{member_id}"

    @property
    def roster(self) -> str:
        """The group's roster, written with this topic's target (one node for all topics)."""
        return roster_path(self.group)

    @property
    def fences(self) -> str:
        """The parent of this topic's claim fences."""
        return f"{group_path(self.group)}/fences/{self.topic}"

    @property
    def finished(self) -> str:
        """The parent of this topic's notes of records finished past the stored offset."""
        return f"{group_path(self.group)}/finished/{self.topic}"

    @property
    def paused(self) -> str:
        """The parent of this topic's operator pauses."""
        return f"{paused_path(self.group)}/{self.topic}"

    @property
    def skips(self) -> str:
        """The parent of this topic's pending skips."""
        return f"{skips_path(self.group)}/{self.topic}"

    @property
    def stopped(self) -> str:
        """The parent of this topic's partitions stopped by ``on_failure="stop"``."""
        return f"{stopped_path(self.group)}/{self.topic}"

    @property
    def stuck(self) -> str:
        """The parent of this topic's stuck partitions."""
        return f"{stuck_path(self.group)}/{self.topic}"

    def stuck_partition(self, partition: int) -> str:
        """The parent of a partition's stuck marks, one per member that published one."""
        return f"{self.stuck}/{partition}"

    def stuck_node(self, partition: int, member: str) -> str:
        """A member's stuck mark of a partition: its handler or body runs past ``stuck_after``
        (one node per member: a handler of an old owner that outlived a handover and one of the
        new owner are marked, and cleared, apart)."""
        return f"{self.stuck_partition(partition)}/{member}"

    def paused_node(self, partition: int) -> str:
        """A partition's operator pause."""
        return f"{self.paused}/{partition}"

    def skip_node(self, partition: int) -> str:
        """A partition's pending skip."""
        return f"{self.skips}/{partition}"

    def stopped_node(self, partition: int) -> str:
        """A partition's stop: the record ``on_failure="stop"`` stopped on."""
        return f"{self.stopped}/{partition}"

    def member(self, member_id: str) -> str:
        """A member's registration node."""
        return member_path(self.group, member_id)

    def owner(self, partition: int) -> str:
        """A partition's claim node."""
        return f"{self.owners}/{partition}"

    def offset(self, partition: int) -> str:
        """A partition's stored offset node."""
        return f"{self.offsets}/{partition}"

    def fence(self, partition: int) -> str:
        """A partition's claim fence: its version is the epoch of the partition's newest claim."""
        return f"{self.fences}/{partition}"

    def note(self, partition: int) -> str:
        """A partition's note of the records finished past its stored offset."""
        return f"{self.finished}/{partition}"


@dataclass(frozen=True)
class Registration:
    """What a member's registration node says, as this library or Kafka's ZooKeeper consumer
    wrote it; the member and the ``aio-cluster`` command read it alike.

    ``entries`` are the keys of its ``subscription`` map: the topics where ``pattern`` is
    ``static``, the one regular expression of a ``white_list`` (topics it matches) or
    ``black_list`` (topics it does not) otherwise. A pattern is matched against the whole topic
    name, as Java's ``String.matches`` did for Kafka's consumer.
    """

    entries: tuple[str, ...]
    """The keys of the registration's ``subscription`` map, sorted."""
    pattern: str = "static"
    """The registration's ``pattern``: ``static``, ``white_list``, ``black_list``, or any other
    text another tool wrote."""
    strategy: Strategy | str = Strategy.RANGE
    """The member's assignment strategy; an unknown one is kept as its text."""
    since_ms: int | None = None
    """When the member registered, in Unix milliseconds; None where the registration does not
    say."""
    name: str | None = None
    """The member's ``member_name``, for a named member."""
    rejoin_grace: float | None = None
    """How long, in seconds, a named member's partitions wait for it to come back."""
    protocol: int = 1
    """The group protocol the member follows (see `aio_cluster.assign.shares`): 1 where the
    registration names none (an older release, or another tool)."""
    host: str | None = None
    """The host name the member registered from; None where the registration does not say."""
    rack: str | None = None
    """The member's rack (see `aio_cluster.assign.racks`); None where it has none."""

    @functools.cached_property
    def subscription(self) -> Subscription:
        """What the member reads, by the library's rules (see `understood`)."""
        return Subscription.recorded(self.pattern, self.entries)

    @property
    def understood(self) -> bool:
        """Whether the library reads the recorded subscription as written: ``static``, or a
        ``white_list`` / ``black_list`` of one regular expression Python compiles. One it does
        not (a kind of pattern unknown here, an expression Python refuses) is read as the
        single-topic releases read every registration, as the topics named; a reader that must
        not miss a member (a reset) takes such a member as reading any topic."""
        return self.subscription.kind == self.pattern

    @property
    def topics(self) -> frozenset[str]:
        """The topics a static subscription names (none for a pattern, whose regex is no topic
        name)."""
        return frozenset(self.subscription.topics)

    def subscribes(self, topic: str) -> bool:
        """Whether the member reads ``topic`` (for a pattern: whether it matches the name)."""
        return self.subscription.matches(topic)


def check_member_name(name: object) -> None:
    """A ``member_name`` is a member id, one path segment under ``ids`` and in owner nodes.

    Raises:
        ConfigurationError: it is not a string of 1 to 249 of the characters A-Z a-z 0-9 . _ -
            (nor ``.`` or ``..``).
    """
    check_name("member", name)


def encode_registration(
    subscription: str | Subscription,
    strategy: Strategy,
    timestamp_ms: int,
    *,
    name: str | None = None,
    rejoin_grace: float | None = None,
    host: str | None = None,
    rack: str | None = None,
) -> bytes:
    """The registration data: the classic JSON, plus the member's assignment strategy and group
    protocol, the host it runs on, its rack if it has one and, for a named member, its name and
    grace (classic tools
    ignore fields they do not know).

    The subscription is written as Kafka's ZooKeeper consumer wrote it (``TopicCount``): the
    topics (or the one regex of a pattern) as the keys of ``subscription``, each with one stream,
    and ``pattern`` saying ``static``, ``white_list`` or ``black_list``.
    """
    if isinstance(subscription, str):
        subscription = Subscription(kind="static", topics=(subscription,))
    doc: dict[str, object] = {
        "version": 1,
        "subscription": dict.fromkeys(subscription.entries, 1),
        "pattern": subscription.kind,
        "timestamp": str(timestamp_ms),
        "assignment": strategy.value,
        "protocol": SHARES_PROTOCOL,
    }
    if name is not None:
        doc["name"] = name
    if rejoin_grace is not None:
        doc["rejoin_grace"] = rejoin_grace
    if host is not None:
        doc["host"] = host
    if rack is not None:
        doc["rack"] = rack
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_registration(data: bytes) -> Registration:
    """Read a registration written by this library or another classic ZooKeeper consumer.

    A registration without an ``assignment`` field comes from a classic consumer, whose default is
    the range strategy. An unknown strategy is kept as its text, so it never matches ours. One
    without a ``pattern`` (an older one) is static.

    Raises:
        CoordinationError: the data is not a registration (no JSON object with a
            ``subscription`` object).
    """
    try:
        doc = json.loads(data)
        subscription = doc["subscription"]
        if not isinstance(subscription, dict):
            raise TypeError(subscription)
    except (ValueError, KeyError, TypeError) as exc:
        raise CoordinationError(f"member registration {data[:80]!r} is not valid JSON") from exc
    raw = doc.get("assignment", Strategy.RANGE.value)
    try:
        strategy: Strategy | str = Strategy(raw)
    except ValueError:
        strategy = str(raw)
    stamp = str(doc.get("timestamp", ""))
    pattern = doc.get("pattern", "static")
    name = doc.get("name")
    protocol = doc.get("protocol", 1)
    host, rack = doc.get("host"), doc.get("rack")
    return Registration(
        entries=tuple(sorted(str(key) for key in subscription)),
        pattern=pattern if isinstance(pattern, str) else str(pattern),
        strategy=strategy,
        since_ms=int(stamp) if stamp.isascii() and stamp.isdigit() else None,
        name=name if isinstance(name, str) else None,
        rejoin_grace=_seconds(doc.get("rejoin_grace")),
        protocol=protocol if isinstance(protocol, int) and not isinstance(protocol, bool) else 1,
        host=host if isinstance(host, str) and host else None,
        rack=rack if isinstance(rack, str) and rack else None,
    )


def _seconds(value: object) -> float | None:
    """A non-negative number of seconds, or None for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        return None
    return float(value)


def encode_target(target: StickyTarget, *, shares: bool = False) -> bytes:
    """The target node's data: JSON with each member's partitions listed once under its id,
    which keeps 1,000 partitions in a few kilobytes (well under ZooKeeper's 1 MB node limit).
    ``shares``: the share nodes were written with it, in the same transaction, so they say
    exactly what it does (older releases ignore the field)."""
    by_member: dict[str, list[int]] = {member: [] for member in target.members}
    for partition, owner in sorted(target.owners.items()):
        by_member.setdefault(owner, []).append(partition)
    doc: dict[str, object] = {
        "version": target.version,
        "members": list(target.members),
        "partitions": by_member,
    }
    if target.graces:
        doc["graces"] = target.graces
    if target.absent:
        doc["absent"] = target.absent
    if target.barred:
        doc["barred"] = {member: list(ps) for member, ps in target.barred.items()}
    if shares:
        doc["shares"] = True
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_target(data: bytes) -> StickyTarget:
    """Read a target node.

    Raises:
        CoordinationError: the data is not a target, or gives a partition to two members.
    """
    return decode_target_node(data)[0]


def decode_target_node(data: bytes) -> tuple[StickyTarget, bool]:
    """Read a target node: the target, and whether its share nodes were written with it (by a
    publisher of `SHARES_PROTOCOL`; see `encode_target`).

    Raises:
        CoordinationError: the data is not a target, or gives a partition to two members.
    """
    try:
        doc = json.loads(data)
        version = doc["version"]
        members = tuple(doc["members"])
        lists = doc["partitions"]
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise TypeError(version)
        if not all(isinstance(member, str) for member in members):
            raise TypeError(members)
        pairs = [(int(p), str(member)) for member, ps in lists.items() for p in ps]
        if any(isinstance(p, bool) or not isinstance(p, int) for ps in lists.values() for p in ps):
            raise TypeError(lists)
        graces = {str(m): _seconds(g) for m, g in doc.get("graces", {}).items()}
        absent = {str(m): until for m, until in doc.get("absent", {}).items()}
        if any(g is None for g in graces.values()):
            raise TypeError(graces)
        if any(isinstance(u, bool) or not isinstance(u, int) for u in absent.values()):
            raise TypeError(absent)
        barred = {str(m): tuple(_partitions(ps)) for m, ps in doc.get("barred", {}).items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CoordinationError(f"assignment target {data[:80]!r} is not valid JSON") from exc
    owners = dict(pairs)
    if len(owners) != len(pairs):
        raise CoordinationError(f"assignment target version {version} gives a partition twice")
    target = StickyTarget(
        version=version,
        members=members,
        owners=owners,
        graces={m: g for m, g in graces.items() if g is not None},
        absent=absent,
        barred=barred,
    )
    return target, doc.get("shares") is True


def encode_share(version: int, share: Share) -> bytes:
    """A share node's data: the member's partitions, how many the topic has, whether it
    deputizes, and the version of the target that last changed them (for the logs; a share is
    rewritten only when it changes)."""
    doc: dict[str, object] = {
        "version": version,
        "partitions": list(share.partitions),
        "of": share.of,
    }
    if share.deputy:
        doc["deputy"] = True
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_share(data: bytes) -> tuple[int, Share]:
    """Read a share node: the target version that wrote it, and the share.

    Raises:
        CoordinationError: the data is not a share.
    """
    try:
        doc = json.loads(data)
        version = doc["version"]
        partitions = doc["partitions"]
        of = doc["of"]
        if any(isinstance(n, bool) or not isinstance(n, int) for n in (version, of)):
            raise TypeError(version, of)
        if not isinstance(partitions, list) or any(
            isinstance(p, bool) or not isinstance(p, int) for p in partitions
        ):
            raise TypeError(partitions)
    except (ValueError, KeyError, TypeError) as exc:
        raise CoordinationError(f"share {data[:80]!r} is not valid JSON") from exc
    return version, Share(tuple(sorted(partitions)), doc.get("deputy") is True, of)


def _partitions(value: object) -> list[int]:
    """A JSON list of partition ids.

    Raises:
        TypeError: it is not one.
    """
    if not isinstance(value, list) or any(
        isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in value
    ):
        raise TypeError(value)
    return value


def encode_mark(mark: Mark) -> bytes:
    """A mark node's data: since when, the last error, whether the member still reads some
    partitions, and each partition it cannot read with the leader it knew."""
    doc = {
        "since": mark.since,
        "error": mark.error,
        "reads": mark.reads,
        "at": mark.at,
        "settle": mark.settle,
        "partitions": {
            topic: {str(p): broker for p, broker in sorted(ps.items())}
            for topic, ps in sorted(mark.partitions.items())
        },
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_mark(data: bytes) -> Mark:
    """Read a mark node.

    Raises:
        CoordinationError: the data is not a mark (written by something else: ignored by the
            readers, which log it).
    """
    try:
        doc = json.loads(data)
        since, error, reads = doc["since"], doc["error"], doc["reads"]
        at, settle = doc["at"], doc["settle"]
        if any(isinstance(n, bool) or not isinstance(n, int) for n in (since, at, settle)):
            raise TypeError(since, at, settle)
        if not isinstance(error, str) or not isinstance(reads, bool):
            raise TypeError(error, reads)
        partitions: dict[str, dict[int, int | None]] = {}
        for topic, ps in doc["partitions"].items():
            check_name("topic", topic)
            found = partitions[topic] = {}
            for p, broker in ps.items():
                if broker is not None and (isinstance(broker, bool) or not isinstance(broker, int)):
                    raise TypeError(broker)
                if not p.isdigit():
                    raise TypeError(p)
                found[int(p)] = broker
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CoordinationError(f"mark {data[:80]!r} is not valid") from exc
    return Mark(partitions, since, error, reads, at, settle)


def decode_offset(path: str, data: bytes) -> int:
    """Read a stored offset: a non-negative decimal integer.

    Raises:
        CorruptOffsetError: the node holds something else (the path and the data are named).
    """
    text = data.decode("ascii", errors="replace").strip()
    if not text.isdigit():
        raise CorruptOffsetError(path, data)
    return int(text)
