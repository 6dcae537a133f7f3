"""Properties of the shares a target is published by, and of who watches the registrations
(pure, no servers)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from aio_cluster.assign.shares import (
    SHARES_PROTOCOL,
    Share,
    predecessor,
    share_changes,
    shares_of,
    watches_registrations,
)
from aio_cluster.assign.strategies import Strategy
from aio_cluster.assign.target import StickyTarget, next_target
from aio_cluster.zookeeper.layout import (
    decode_registration,
    decode_share,
    decode_target_node,
    encode_registration,
    encode_share,
    encode_target,
)

partitions_st = st.sets(st.integers(min_value=0, max_value=300), max_size=100)
members_st = st.lists(
    st.text(alphabet="abcdef0123", min_size=1, max_size=6), min_size=1, max_size=15, unique=True
)


def apply(
    nodes: dict[str, Share | None], before: dict[str, Share], after: dict[str, Share]
) -> None:
    """Apply `share_changes(before, after)` to ``nodes`` as the transaction would: a create of
    a node that exists, or a set or delete of one that does not, fails it."""
    changes = share_changes(before, after)
    for member, share in changes.created.items():
        assert member not in nodes, "create of an existing share"
        nodes[member] = share
    for member, share in changes.changed.items():
        assert member in nodes, "set of a missing share"
        nodes[member] = share
    for member in changes.deleted:
        assert member in nodes, "delete of a missing share"
        del nodes[member]


@given(partitions_st, members_st, members_st)
def test_shares_cover_the_target_and_changes_lead_from_one_to_the_next(
    partitions: set[int], first: list[str], second: list[str]
) -> None:
    one = next_target(None, partitions, first)
    assert one is not None
    two = next_target(one, partitions, second) or one
    for target in (one, two):
        shares = shares_of(target)
        assert set(shares) == set(target.members)
        given_out = [p for share in shares.values() for p in share.partitions]
        assert sorted(given_out) == sorted(target.owners)
        assert [m for m, s in shares.items() if s.deputy] == list(target.present[1:2])
        assert {s.of for s in shares.values()} == {len(target.owners)}
    nodes: dict[str, Share | None] = dict(shares_of(one))
    apply(nodes, shares_of(one), shares_of(two))
    assert nodes == shares_of(two)


def test_a_join_rewrites_only_the_shares_that_change() -> None:
    members = ["a", "b", "c", "d"]
    one = next_target(None, range(8), members)
    assert one is not None
    two = next_target(one, range(8), [*members, "e"])
    assert two is not None
    changes = share_changes(shares_of(one), shares_of(two))
    assert set(changes.created) == {"e"}
    # The newcomer takes the least a balance allows (one partition): one member gives it.
    assert len(changes.changed) == 1
    assert changes.deleted == []


def test_a_topic_that_grows_rewrites_every_share() -> None:
    one = next_target(None, range(8), ["a", "b", "c", "d"])
    assert one is not None
    grown = next_target(one, range(9), ["a", "b", "c", "d"])
    assert grown is not None
    changes = share_changes(shares_of(one), shares_of(grown))
    assert set(changes.changed) == {"a", "b", "c", "d"}


def test_shares_of_unknown_content_are_all_written_again() -> None:
    target = next_target(None, range(4), ["a", "b"])
    assert target is not None
    changes = share_changes({"a": None, "z": None}, shares_of(target))
    assert set(changes.created) == {"b"}
    assert set(changes.changed) == {"a"}
    assert changes.deleted == ["z"]


def test_the_leader_and_the_deputy_watch_the_registrations_the_others_do_not() -> None:
    ordered = ["a", "b", "c", "d"]
    new = dict.fromkeys(ordered, SHARES_PROTOCOL)
    watching = [m for m in ordered if watches_registrations(m, ordered, new, [ordered])]
    assert watching == ["a", "b"]
    # Topic by topic: the first two readers of each.
    assert watches_registrations("d", ordered, new, [["a", "b"], ["c", "d"]])


def test_a_member_younger_than_one_of_an_older_protocol_watches_them() -> None:
    ordered = ["a", "b", "c", "d"]
    mixed = {"a": SHARES_PROTOCOL, "b": 1, "c": SHARES_PROTOCOL, "d": SHARES_PROTOCOL}
    assert [m for m in ordered if watches_registrations(m, ordered, mixed, [ordered])] == [
        "a",
        "b",
        "c",
        "d",
    ]
    # An older member younger than the new ones changes nothing for them.
    late = {"a": SHARES_PROTOCOL, "b": SHARES_PROTOCOL, "c": SHARES_PROTOCOL, "d": 1}
    assert not watches_registrations("c", ordered, late, [ordered])


def test_each_member_watches_the_one_before_it() -> None:
    assert predecessor("a", ["a", "b", "c"]) is None
    assert predecessor("c", ["a", "b", "c"]) == "b"
    assert predecessor("x", ["a", "b"]) is None


def test_the_encodings_round_trip_and_older_registrations_are_protocol_1() -> None:
    share = Share((3, 1), deputy=True, of=4)
    assert decode_share(encode_share(7, share)) == (7, Share((1, 3), True, 4))
    assert decode_share(encode_share(0, Share(()))) == (0, Share(()))
    target = StickyTarget(version=2, members=("a", "b"), owners={0: "a", 1: "b"})
    assert decode_target_node(encode_target(target, shares=True)) == (target, True)
    assert decode_target_node(encode_target(target)) == (target, False)
    registration = decode_registration(b'{"version":1,"subscription":{"t":1},"pattern":"static"}')
    assert registration.protocol == 1
    written = encode_registration("t", Strategy.STICKY, 0)
    assert decode_registration(written).protocol == SHARES_PROTOCOL
