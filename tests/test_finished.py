"""The notes of records finished past a partition's prefix (`aio_cluster.member.delivery.finished`):
kept beside their claim, stored as runs, and read back only as written."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from aio_cluster.kafka.topics import PartitionKey
from aio_cluster.member.delivery import finished
from aio_cluster.member.delivery.claims import Claim


@given(
    epoch=st.integers(0, 2**31),
    offset=st.integers(0, 2**40),
    gaps=st.lists(st.integers(1, 5), max_size=200),
)
def test_a_note_reads_back_as_written(epoch: int, offset: int, gaps: list[int]) -> None:
    offsets, at = set(), offset
    for gap in gaps:
        at += gap
        offsets.add(at)
    data = finished.encode(epoch, offset, frozenset(offsets))
    assert finished.decode(data) == (epoch, offset, frozenset(offsets))


def test_runs_keep_a_note_small() -> None:
    data = finished.encode(3, 100, frozenset(range(101, 10_101)))
    assert data == b'{"epoch":3,"offset":100,"finished":[[101,10100]]}'


def test_what_is_not_a_note_is_ignored() -> None:
    for data in (
        b"",
        b"12",
        b"{}",
        b'{"epoch":"1","offset":5,"finished":[]}',
        b'{"epoch":1,"offset":5,"finished":[[1,2]]}',  # not past its offset
        b'{"epoch":1,"offset":5,"finished":[[7]]}',
        b'{"epoch":1,"offset":5,"finished":[["7","8"]]}',
    ):
        assert finished.decode(data) is None, data


def test_a_note_lives_beside_its_claim_and_names_what_is_past_an_offset() -> None:
    claim, other = Claim(PartitionKey(0), 0, 10, 10), Claim(PartitionKey(0), 0, 10, 10)
    finished.note(claim, 10, frozenset({12, 15}))
    known = finished.noted(claim)
    assert known is not None
    assert finished.noted(other) is None, "a claim of its own: another claim knows nothing"
    assert known.beyond(10) == {12, 15}
    assert known.beyond(12) == {15}
    assert known.beyond(15) == frozenset()
    finished.note(claim, 16, frozenset())
    assert finished.noted(claim) is None, "an empty note is forgotten"
