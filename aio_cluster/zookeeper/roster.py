"""The roster: the group's registrations as one member last read them, in one node (pure, no I/O).

A newcomer needs every member's registration (the members' order, subscriptions, strategies and
protocols decide whether it leads, deputizes or follows its share, and whom it watches): read one
by one, that is one request per member. A sticky leader therefore publishes what it read, in the
same transaction as its target::

    /consumers/<group>/roster    persistent, the registrations a leader last read (JSON)

and a newcomer starts from it: it lists the ``ids`` node (one request, which also gives the
node's child version) and reads only the registrations the roster lacks. A roster is a snapshot
of one member's cache (`aio_cluster.member.protocol.registration.Registrar.read_members`): the names
listed, the ``ids`` node's child version then, and the registrations with their creation zxids.
Whether a snapshot still holds is decided exactly as for a member's own cache: it does when the
child version moved by as many changes as the names that came and went show; otherwise one
registration was deleted and made again under the same id (a new creation zxid) and every
registration is read. So any roster, however old or whoever wrote it, is safe to start from,
and a missing or unreadable one only costs the reads it would have saved. The classic ``ids``
nodes stay the truth; classic tools ignore the roster.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..assign.strategies import Strategy
from ..errors import CoordinationError
from .layout import Registration

__all__ = ["ROSTER_LIMIT", "Roster", "decode_roster", "encode_roster"]

ROSTER_LIMIT = 128 * 1024
"""The largest roster written, in bytes (about 500 members of one topic each): it shares its
transaction, and ZooKeeper's 1 MB request limit, with the target. A larger group writes none,
and its newcomers read every registration."""


@dataclass(frozen=True)
class Roster:
    """A snapshot of the group's registrations as one member read them."""

    ids_version: int
    """The ``ids`` node's child version when ``names`` were listed."""
    names: frozenset[str]
    """The registration names listed then (some may lack a readable registration)."""
    members: Mapping[str, tuple[Registration, int]] = field(default_factory=dict)
    """member -> its registration and creation zxid."""


def encode_roster(roster: Roster) -> bytes | None:
    """The roster node's data: JSON, members oldest first; None when over `ROSTER_LIMIT`."""
    ordered = sorted(roster.members.items(), key=lambda item: item[1][1])
    doc = {
        "version": 1,
        "ids_version": roster.ids_version,
        "names": sorted(roster.names),
        "members": [[member, czxid, _registration(info)] for member, (info, czxid) in ordered],
    }
    data = json.dumps(doc, separators=(",", ":")).encode()
    return data if len(data) <= ROSTER_LIMIT else None


def _registration(info: Registration) -> dict[str, object]:
    """One registration's fields, those at their default left out."""
    doc: dict[str, object] = {
        "entries": list(info.entries),
        "pattern": info.pattern,
        "strategy": info.strategy.value if isinstance(info.strategy, Strategy) else info.strategy,
        "protocol": info.protocol,
    }
    optional = {
        "since_ms": info.since_ms,
        "name": info.name,
        "rejoin_grace": info.rejoin_grace,
        "host": info.host,
        "rack": info.rack,
    }
    doc.update((key, value) for key, value in optional.items() if value is not None)
    return doc


def decode_roster(data: bytes) -> Roster:
    """Read a roster node.

    Raises:
        CoordinationError: the data is not a roster (none written yet leaves the node empty).
    """
    try:
        doc = json.loads(data)
        version = _int(doc["ids_version"])
        names = doc["names"]
        if not all(isinstance(name, str) for name in names):
            raise TypeError(names)
        members = {}
        for member, czxid, info in doc["members"]:
            if not isinstance(member, str):
                raise TypeError(member)
            members[member] = (_decode_registration(info), _int(czxid))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CoordinationError(f"roster {data[:80]!r} is not valid JSON") from exc
    return Roster(version, frozenset(names), members)


def _decode_registration(doc: dict[str, object]) -> Registration:
    entries = doc["entries"]
    pattern, strategy, name = doc["pattern"], doc["strategy"], doc.get("name")
    since, grace, host = doc.get("since_ms"), doc.get("rejoin_grace"), doc.get("host")
    rack = doc.get("rack")
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise TypeError(entries)
    if not isinstance(pattern, str) or not isinstance(strategy, str):
        raise TypeError(pattern, strategy)
    if name is not None and not isinstance(name, str):
        raise TypeError(name)
    if host is not None and not isinstance(host, str):
        raise TypeError(host)
    if rack is not None and not isinstance(rack, str):
        raise TypeError(rack)
    if grace is not None and (isinstance(grace, bool) or not isinstance(grace, (int, float))):
        raise TypeError(grace)
    known = {s.value: s for s in Strategy}
    return Registration(
        entries=tuple(entries),
        pattern=pattern,
        strategy=known.get(strategy, strategy),
        since_ms=None if since is None else _int(since),
        name=name,
        rejoin_grace=None if grace is None else float(grace),
        protocol=_int(doc["protocol"]),
        host=host,
        rack=rack,
    )


def _int(value: object) -> int:
    """``value``, an integer (not a bool).

    Raises:
        TypeError: it is not one.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(value)
    return value
