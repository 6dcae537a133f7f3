"""The roster's encoding (pure, no servers): what a sticky leader writes of the registrations it
read, and what a newcomer accepts of it."""

from __future__ import annotations

import json

import pytest

from aio_cluster import CoordinationError, Strategy
from aio_cluster.kafka.topics import TopicKeys
from aio_cluster.member.protocol.keyed_layout import KeyedLayout
from aio_cluster.zookeeper.layout import GroupLayout, Registration, roster_path
from aio_cluster.zookeeper.roster import ROSTER_LIMIT, Roster, decode_roster, encode_roster

SOME = Roster(
    ids_version=7,
    names=frozenset({"a", "b", "c", "gone"}),
    members={
        "b": (Registration(("orders",), strategy=Strategy.STICKY, since_ms=5, protocol=2), 40),
        "a": (
            Registration(
                ("orders", "payments"),
                strategy=Strategy.STICKY,
                name="a",
                rejoin_grace=30.0,
                protocol=2,
                host="web-1.example",
                rack="eu-west-1a",
            ),
            12,
        ),
        "c": (Registration(("orders.*",), pattern="white_list", strategy="weird"), 41),
    },
)


def test_the_roster_is_one_node_per_group_beside_the_classic_ones() -> None:
    assert roster_path("g") == "/consumers/g/roster"
    assert GroupLayout("g", "t").roster == GroupLayout("g", "u").roster == roster_path("g")
    assert KeyedLayout("g", TopicKeys(("t",)), many=False).roster == roster_path("g")


def test_a_roster_round_trips_every_field_a_member_decides_by() -> None:
    data = encode_roster(SOME)
    assert data is not None
    assert decode_roster(data) == SOME


def test_members_are_written_oldest_first() -> None:
    data = encode_roster(SOME)
    assert data is not None
    assert [entry[0] for entry in json.loads(data)["members"]] == ["a", "b", "c"]


def test_a_roster_over_the_limit_is_not_written() -> None:
    many = {
        f"member-{i:04d}": (Registration((f"topic-{i}",), strategy=Strategy.STICKY), i)
        for i in range(2000)
    }
    big = Roster(1, frozenset(many), many)
    assert encode_roster(big) is None
    small = encode_roster(Roster(1, frozenset(list(many)[:100]), dict(list(many.items())[:100])))
    assert small is not None
    assert len(small) < ROSTER_LIMIT


@pytest.mark.parametrize(
    "data",
    [
        b"",  # the node made with its parents, never written
        b"not json",
        b"[]",
        b'{"names": [], "members": []}',
        b'{"ids_version": true, "names": [], "members": []}',
        b'{"ids_version": 1, "names": [3], "members": []}',
        b'{"ids_version": 1, "names": [], "members": [["a", "12", {}]]}',
        b'{"ids_version": 1, "names": [], "members": [["a", 12, []]]}',
        b'{"ids_version": 1, "names": [], "members": [["a", 12, {"entries": "t", "pattern":'
        b' "static", "strategy": "sticky", "protocol": 2}]]}',
        b'{"ids_version": 1, "names": [], "members": [["a", 12, {"entries": ["t"], "pattern":'
        b' "static", "strategy": "sticky", "protocol": false}]]}',
        b'{"ids_version": 1, "names": [], "members": [["a", 12, {"entries": ["t"], "pattern":'
        b' "static", "strategy": "sticky", "protocol": 2, "rejoin_grace": "1"}]]}',
    ],
)
def test_anything_else_is_no_roster(data: bytes) -> None:
    with pytest.raises(CoordinationError, match="roster"):
        decode_roster(data)
