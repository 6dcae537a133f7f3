"""The ZooKeeper layout and the data kept in it (pure, no servers)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import aio_cluster
from aio_cluster import ConfigurationError, CoordinationError, CorruptOffsetError, Strategy
from aio_cluster.assign.target import StickyTarget
from aio_cluster.kafka.options import parse_bootstrap
from aio_cluster.kafka.topics import PartitionKey, TopicKeys
from aio_cluster.member.protocol.keyed_layout import KeyedLayout
from aio_cluster.zookeeper.client import parse_hosts
from aio_cluster.zookeeper.layout import (
    ROOT,
    GroupLayout,
    decode_offset,
    decode_registration,
    decode_target,
    encode_registration,
    encode_target,
    group_path,
    ids_path,
    member_path,
    offsets_path,
    owners_path,
)


def test_classic_paths() -> None:
    layout = GroupLayout("my-group", "my.topic")
    assert layout.member("m-1") == "/consumers/my-group/ids/m-1"
    assert layout.owner(3) == "/consumers/my-group/owners/my.topic/3"
    assert layout.offset(0) == "/consumers/my-group/offsets/my.topic/0"


def test_the_group_paths_are_spelled_in_one_place() -> None:
    assert (ROOT, group_path("g"), ids_path("g")) == (
        "/consumers",
        "/consumers/g",
        "/consumers/g/ids",
    )
    assert member_path("g", "m") == GroupLayout("g", "t").member("m") == "/consumers/g/ids/m"
    assert owners_path("g") == "/consumers/g/owners"
    assert offsets_path("g") == "/consumers/g/offsets"
    keyed = KeyedLayout("g", TopicKeys(("t", "u")), many=True)
    assert (keyed.root, keyed.ids, keyed.member("m")) == (
        ROOT,
        ids_path("g"),
        member_path("g", "m"),
    )
    assert keyed.offset(PartitionKey(2**31 + 4)) == GroupLayout("g", "u").offset(4)
    package = Path(aio_cluster.__file__).parent
    spelled = [
        str(path.relative_to(package))
        for path in sorted(package.rglob("*.py"))
        if re.search(r'f?"/consumers', path.read_text()) and path.name != "layout.py"
    ]
    assert spelled == [], "only zookeeper/layout.py spells the layout's paths"


@pytest.mark.parametrize("bad", ["", "a/b", "..", ".", "x" * 250, "spa ce", "ü"])
def test_bad_names_are_refused_with_the_name(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="topic name"):
        GroupLayout("group", bad)
    with pytest.raises(ConfigurationError, match="group name"):
        GroupLayout(bad, "topic")


def test_member_data_is_the_classic_json_plus_strategy_and_protocol() -> None:
    doc = json.loads(encode_registration("t", Strategy.ROUND_ROBIN, 1234))
    assert doc == {
        "version": 1,
        "subscription": {"t": 1},
        "pattern": "static",
        "timestamp": "1234",
        "assignment": "roundrobin",
        "protocol": 2,
    }
    info = decode_registration(encode_registration("t", Strategy.ROUND_ROBIN, 1234))
    assert info.topics == {"t"}
    assert info.strategy is Strategy.ROUND_ROBIN


def test_a_registration_names_the_host_it_came_from() -> None:
    data = encode_registration("t", Strategy.STICKY, 1, name="web", host="web-1.example")
    assert json.loads(data)["host"] == "web-1.example"
    assert decode_registration(data).host == "web-1.example"
    assert decode_registration(encode_registration("t", Strategy.STICKY, 1)).host is None
    assert decode_registration(data.replace(b'"web-1.example"', b"7")).host is None


def test_a_registration_names_its_rack_and_one_without_reads_as_none() -> None:
    data = encode_registration("t", Strategy.STICKY, 1, rack="eu-west-1a")
    assert decode_registration(data).rack == "eu-west-1a"
    assert "rack" not in json.loads(encode_registration("t", Strategy.STICKY, 1))
    assert decode_registration(data.replace(b'"eu-west-1a"', b"7")).rack is None
    older = b'{"version":1,"subscription":{"t":1},"pattern":"static","timestamp":"1"}'
    assert decode_registration(older).rack is None


def test_classic_consumer_registration_counts_as_range() -> None:
    data = b'{"version":1,"subscription":{"t":1},"pattern":"static","timestamp":"1"}'
    assert decode_registration(data).strategy is Strategy.RANGE
    assert (
        decode_registration(data.replace(b'"1"}', b'"1","assignment":"sticky"}')).strategy
        == "sticky"
    )


@pytest.mark.parametrize("data", [b"{}", b"not json", b'{"subscription": 3}', b"[]"])
def test_bad_member_data(data: bytes) -> None:
    with pytest.raises(CoordinationError, match="registration"):
        decode_registration(data)


@given(st.integers(min_value=0, max_value=2**63))
def test_offsets_round_trip(offset: int) -> None:
    assert decode_offset("/p", str(offset).encode()) == offset


@pytest.mark.parametrize("data", [b"", b"-1", b"12a", b"\xff", b"1.5"])
def test_bad_offset_names_node_and_data(data: bytes) -> None:
    with pytest.raises(CorruptOffsetError, match="/consumers/g/offsets/t/0"):
        decode_offset("/consumers/g/offsets/t/0", data)


def test_connect_strings() -> None:
    assert parse_hosts(["a:1", "b:2"]) == "a:1,b:2"
    assert parse_hosts("a:1,b:2/chroot") == "a:1,b:2/chroot"
    assert parse_bootstrap("a:1, b:2") == ["a:1", "b:2"]


@pytest.mark.parametrize("bad", ["", "host", "host:0", "host:x", ":9", "h:70000", "h:\u00b2"])
def test_bad_connect_strings_name_the_server(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="ZooKeeper"):
        parse_hosts(bad)
    with pytest.raises(ConfigurationError, match="Kafka"):
        parse_bootstrap(bad)


def test_target_node_sits_beside_the_classic_nodes() -> None:
    assert GroupLayout("g", "t").assignment == "/consumers/g/assignment/t"


@given(
    version=st.integers(0, 2**40),
    owners=st.dictionaries(st.integers(0, 5000), st.sampled_from(["m-1", "m-2", "m-3"])),
)
def test_targets_round_trip(version: int, owners: dict[int, str]) -> None:
    members = ("m-2", "m-1", "m-3")
    target = StickyTarget(version=version, members=members, owners=owners)
    assert decode_target(encode_target(target)) == target


def test_target_lists_each_member_once() -> None:
    doc = json.loads(encode_target(StickyTarget(4, ("a", "b"), {2: "b", 0: "a", 1: "a"})))
    assert doc == {"version": 4, "members": ["a", "b"], "partitions": {"a": [0, 1], "b": [2]}}


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"[]",
        b'{"version": 1}',
        b'{"version": -1, "members": [], "partitions": {}}',
        b'{"version": true, "members": [], "partitions": {}}',
        b'{"version": 1, "members": [3], "partitions": {}}',
        b'{"version": 1, "members": ["a"], "partitions": {"a": ["x"]}}',
        b'{"version": 1, "members": ["a"], "partitions": {"a": [true]}}',
        b'{"version": 1, "members": ["a"], "partitions": []}',
    ],
)
def test_bad_target_data(data: bytes) -> None:
    with pytest.raises(CoordinationError, match="assignment target"):
        decode_target(data)


def test_target_giving_a_partition_twice_is_refused() -> None:
    data = b'{"version": 7, "members": ["a", "b"], "partitions": {"a": [1], "b": [1]}}'
    with pytest.raises(CoordinationError, match="version 7 gives a partition twice"):
        decode_target(data)
