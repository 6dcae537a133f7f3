"""Finished beyond the prefix: records of a partition whose handlers finished after its first
unfinished record, kept beside the claim and stored beside its offset, so that nobody handles
them again.

`process()` stores a partition's completed prefix (its first unfinished record) as the classic
offset. When it stops without a graceful handover (its call cancelled, its batch abandoned after
``rebalance_timeout``), records of other keys after that offset may have finished too; read
again from the offset, they would be handled twice. So the processor notes them on the claim
(`note()`), the offset write stores them in a node of the project's own beside the classic ones
(`KeyedLayout.note`), in the same transaction and under the same fence checks, and the next owner
(or the same member's next ``process()``) passes over them (`noted()`). The ``async for`` loop hands
them out again: a batch body is one unit, never split.

A note is stored with the offset it goes with and the claim's epoch (its fence's version). It
counts only for the claim that follows that one (epoch one more) and only while the offset
stored is that offset: an offset written by anyone else (``aio-cluster reset-offsets``, which
bumps the fences too, or a classic tool) or a claim between them makes it stale, and a stale
note is ignored: the records are handled again (at least once), never skipped wrongly.

A note lives beside its claim object in a weak table: it dies with the claim.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from .claims import Claim

__all__ = [
    "Note",
    "anything_noted",
    "decode",
    "encode",
    "forget",
    "note",
    "noted",
]

MAX_BYTES = 512 * 1024
"""The largest note stored (a ZooKeeper node holds at most 1 MiB by default); a larger one is
not stored, and its records may be handled again."""


@dataclass(frozen=True)
class Note:
    """What finished beyond a claim's prefix."""

    base: int
    """The offset of the first unfinished record when it was noted: every offset noted is
    beyond it."""
    offsets: frozenset[int]
    """The offsets of the records that finished beyond ``base``."""
    stored: bool = False
    """True once ZooKeeper holds it as it is (stored with the claim's offset)."""

    def beyond(self, offset: int) -> frozenset[int]:
        """The offsets noted past ``offset``."""
        if offset <= self.base:
            return self.offsets
        return frozenset(o for o in self.offsets if o > offset)


_NOTES: WeakKeyDictionary[Claim, Note] = WeakKeyDictionary()


def noted(claim: Claim) -> Note | None:
    """What finished beyond ``claim``'s prefix, if anything is known to."""
    return _NOTES.get(claim)


def note(claim: Claim, base: int, offsets: frozenset[int], *, stored: bool = False) -> None:
    """Records of ``claim`` past ``base`` finished (those at ``offsets``); an empty set forgets
    the note."""
    if offsets:
        _NOTES[claim] = Note(base, offsets, stored)
    else:
        _NOTES.pop(claim, None)


def anything_noted() -> bool:
    """Whether any claim has a note (most often none has: a cheap look first)."""
    return bool(_NOTES)


def forget(claim: Claim) -> None:
    """Nothing beyond ``claim``'s prefix is known to have finished (any more)."""
    _NOTES.pop(claim, None)


def encode(epoch: int, offset: int, offsets: frozenset[int]) -> bytes:
    """A note's node data: the claim's epoch, the offset stored with it, and the offsets that
    finished beyond it, as runs ``[first, last]``."""
    runs: list[list[int]] = []
    for found in sorted(offsets):
        if runs and runs[-1][1] == found - 1:
            runs[-1][1] = found
        else:
            runs.append([found, found])
    return json.dumps(
        {"epoch": epoch, "offset": offset, "finished": runs}, separators=(",", ":")
    ).encode()


def decode(data: bytes) -> tuple[int, int, frozenset[int]] | None:
    """The epoch, offset and finished offsets of a note's node data; None when it is not one
    (such a note is ignored)."""
    try:
        found = json.loads(data)
        epoch, offset, runs = found["epoch"], found["offset"], found["finished"]
        offsets = frozenset(o for first, last in runs for o in range(first, last + 1))
    except (ValueError, TypeError, KeyError):
        return None
    if not isinstance(epoch, int) or not isinstance(offset, int):
        return None
    if any(o <= offset for o in offsets):  # range() took ints only
        return None
    return epoch, offset, offsets
