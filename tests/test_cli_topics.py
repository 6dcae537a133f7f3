"""The ``aio-cluster`` command on groups of several topics, against the real servers.

A group holds several topics when members of one group name read different topics: each
registers under the group's ``ids/`` with its own topic, and the group's ``offsets/``,
``owners/`` and ``fences/`` hold one folder per topic, as Kafka's ZooKeeper consumer kept them.
Registrations written by a pattern consumer (``white_list`` / ``black_list``) or by a named
member are written by hand here, as such consumers wrote them.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import pytest_asyncio

from aio_cluster import ConsumerGroup
from aio_cluster.local import LocalCluster
from aio_cluster.operator.survey import RESET_FENCE_DATA
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from conftest import MakeTopic, Produce
from support import closable, in_kafka, kafka_tool_describe, member, stored_offsets, wait_until
from test_cli import end_offsets, one_line, run

pytestmark = pytest.mark.asyncio

WINDOW = ("--window", "2s", "--samples", "3")


@dataclass
class ManyTopics:
    """A group of one name over several 2-partition topics, one member per topic."""

    group: str
    topics: list[str]
    members: dict[str, ConsumerGroup]
    committed: dict[str, Counter[int]]
    unread: dict[str, Counter[int]]


async def consume_and_commit(group: ConsumerGroup, count: int) -> Counter[int]:
    """Read ``count`` records, committing each batch: how many came from each partition."""
    seen: Counter[int] = Counter()
    async with contextlib.aclosing(closable(group.batches(commit=False))) as batches:
        async for partition, batch in batches:
            await group.commit(partition, batch[-1].offset + 1)
            seen[partition] += len(batch)
            if sum(seen.values()) == count:
                break
    return seen


@pytest_asyncio.fixture
async def many_topics(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, group_name: str
) -> AsyncIterator[ManyTopics]:
    """Three topics, 20 records of each read and committed by the group, then 10 more of each
    produced; the three members (one per topic) are still joined."""
    topics = sorted([await make_topic(partitions=2) for _ in range(3)])
    for topic in topics:
        await produce(topic, 20)
    async with contextlib.AsyncExitStack() as stack:
        members = {
            topic: await stack.enter_async_context(member(cluster, group_name, topic))
            for topic in topics
        }
        committed = {topic: await consume_and_commit(members[topic], 20) for topic in topics}
        unread = {topic: await produce(topic, 10, start=20) for topic in topics}
        yield ManyTopics(group_name, topics, members, committed, unread)


async def test_describe_and_list_show_every_topic_of_the_group(
    cluster: LocalCluster, zk: ZooKeeper, many_topics: ManyTopics
) -> None:
    group, topics = many_topics.group, many_topics.topics
    code, out, err = await run(cluster, "describe", group, "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert [(row["topic"], row["partition"]) for row in rows] == [
        (topic, p) for topic in topics for p in (0, 1)
    ]
    for topic in topics:
        stored = await stored_offsets(zk, GroupLayout(group, topic), 2)
        ends = await end_offsets(cluster, topic, 2)
        for row in (row for row in rows if row["topic"] == topic):
            p = row["partition"]
            assert row["owner"] == many_topics.members[topic].id
            assert row["committed"] == stored[p] == many_topics.committed[topic][p]
            assert row["end"] == ends[p]
            assert row["lag"] == many_topics.unread[topic][p]

    # --topic narrows, once or repeated.
    code, out, err = await run(cluster, "describe", group, "--topic", topics[1], "--json")
    assert code == 0, err
    assert {row["topic"] for row in json.loads(out)} == {topics[1]}
    narrowed = ("--topic", topics[0], "--topic", topics[2])
    code, out, err = await run(cluster, "describe", group, *narrowed, "--json")
    assert code == 0, err
    assert {row["topic"] for row in json.loads(out)} == {topics[0], topics[2]}

    code, out, err = await run(cluster, "describe", group)
    assert code == 0, err
    for topic in topics:
        assert any(line.split()[:2] == [topic, "0"] for line in out.splitlines()), out
        member_id = many_topics.members[topic].id
        line = next(line for line in out.splitlines() if line.startswith(member_id))
        assert line.split()[-2:] == [topic, "2"], line  # subscription, partitions owned

    code, out, err = await run(cluster, "describe", group, "--members")
    assert code == 0, err
    assert all(m.id in out for m in many_topics.members.values())
    assert not any(line.split()[:1] == [topics[0]] for line in out.splitlines()), out

    code, out, err = await run(cluster, "describe", group, "--members", "--json")
    assert code == 0, err
    members = {entry["member"]: entry for entry in json.loads(out)}
    assert set(members) == {m.id for m in many_topics.members.values()}
    for topic, one in many_topics.members.items():
        entry = members[one.id]
        assert entry["subscription"] == [topic]
        assert entry["pattern"] == "static"
        assert entry["name"] is None
        assert entry["partitions"] == 2
        assert entry["strategy"] == one.strategy.value

    code, out, err = await run(cluster, "list", "--json")
    assert code == 0, err
    assert {"group": group, "topics": topics, "members": 3} in json.loads(out)


async def test_reset_offsets_one_topic_several_or_all_of_them(
    cluster: LocalCluster, zk: ZooKeeper, many_topics: ManyTopics
) -> None:
    group, topics = many_topics.group, many_topics.topics
    layouts = {topic: GroupLayout(group, topic) for topic in topics}
    committed = {topic: dict(counts) for topic, counts in many_topics.committed.items()}

    async def stored() -> dict[str, dict[int, int]]:
        return {topic: await stored_offsets(zk, layouts[topic], 2) for topic in topics}

    assert await stored() == committed

    # Neither --topic nor --all-topics: the choice is named, with the group's topics.
    code, _out, err = await run(cluster, "reset-offsets", group, "--to-earliest")
    assert code == 1
    assert "--all-topics" in one_line(err)
    assert all(topic in err for topic in topics)

    # Refused while members run, naming each topic and its member.
    args = ("reset-offsets", group, "--to-earliest", "--execute")
    code, _out, err = await run(cluster, *args, "--all-topics")
    assert code == 1
    assert "refused" in one_line(err)
    for topic, one in many_topics.members.items():
        assert f"for {topic!r} ({one.id})" in err
    assert await stored() == committed

    for one in many_topics.members.values():
        await one.close()

    code, _out, err = await run(cluster, *args, "--all-topics", "--topic", topics[0])
    assert code == 2
    assert "not allowed with" in one_line(err)
    code, _out, err = await run(cluster, *args, "--all-topics", "--partitions", "0")
    assert code == 1
    assert "--partitions needs one topic" in one_line(err)

    # A dry run over every topic: a row per topic and partition, nothing stored.
    dry = ("reset-offsets", group, "--all-topics", "--to-earliest", "--json")
    code, out, err = await run(cluster, *dry)
    assert code == 0, err
    assert json.loads(out) == [
        {
            "topic": topic,
            "partition": p,
            "old": committed[topic][p],
            "unreadable": None,
            "new": 0,
            "stored": False,
        }
        for topic in topics
        for p in (0, 1)
    ]
    assert await stored() == committed

    # One topic: the others stay.
    ends = await end_offsets(cluster, topics[0], 2)
    code, _out, err = await run(
        cluster, *args[:2], "--topic", topics[0], "--to-latest", "--execute"
    )
    assert code == 0, err
    assert await stored() == {**committed, topics[0]: ends}

    # Two topics named: a JSON row per partition of each, stored.
    two = ("--topic", topics[1], "--topic", topics[2])
    code, out, err = await run(cluster, *args[:2], *two, "--shift-by", "3", "--execute", "--json")
    assert code == 0, err
    shifted = {topic: {p: committed[topic][p] + 3 for p in (0, 1)} for topic in topics[1:]}
    assert [
        (row["topic"], row["partition"], row["new"], row["stored"]) for row in json.loads(out)
    ] == [(topic, p, shifted[topic][p], True) for topic in topics[1:] for p in (0, 1)]
    assert await stored() == {topics[0]: ends, **shifted}

    # Every topic, and every fence of every topic bumped by the one transaction.
    code, out, err = await run(cluster, *args, "--all-topics")
    assert code == 0, err
    assert "6 partition(s) of 3 topic(s)" in out
    assert await stored() == {topic: {0: 0, 1: 0} for topic in topics}
    for layout in layouts.values():
        for p in (0, 1):
            assert (await zk.get(layout.fence(p)))[0] == RESET_FENCE_DATA


async def test_reset_all_topics_leaves_a_topic_kafka_does_not_have(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, group_name: str
) -> None:
    """Offsets of a topic deleted from Kafka stay in ZooKeeper: describe notes the topic, and a
    reset of every topic resets the others and says it left that one."""
    topic = await make_topic(partitions=1)
    gone = GroupLayout(group_name, "deleted-topic-never-created")
    kept = GroupLayout(group_name, topic)
    for layout in (gone, kept):
        await zk.create(layout.offset(0), b"5", makepath=True)

    code, out, err = await run(cluster, "describe", group_name, "--json")
    assert code == 0, err
    assert [row["topic"] for row in json.loads(out)] == [topic]
    code, out, err = await run(cluster, "describe", group_name)
    assert code == 0, err
    assert f"topic {gone.topic} does not exist in Kafka" in out

    args = ("reset-offsets", group_name, "--all-topics", "--to-earliest", "--execute")
    code, _out, err = await run(cluster, *args)
    assert code == 0, err
    assert f"topic {gone.topic} does not exist in Kafka" in one_line(err)
    assert await stored_offsets(zk, kept, 1) == {0: 0}
    assert await stored_offsets(zk, gone, 1) == {0: 5}


async def test_check_judges_every_topic_or_those_named(
    cluster: LocalCluster, many_topics: ManyTopics
) -> None:
    group, topics = many_topics.group, many_topics.topics
    for one in many_topics.members.values():
        await one.close()  # nobody owns anything, with lag on every partition: unowned errors
    code, out, err = await run(cluster, "check", group, *WINDOW, "--json")
    assert code == 2, err
    findings = json.loads(out)
    assert [(f["topic"], f["partition"]) for f in findings] == [
        (topic, p) for topic in topics for p in (0, 1)
    ]
    assert {f["status"] for f in findings} == {"unowned"}

    narrowed = ("--topic", topics[0], "--topic", topics[2])
    code, out, err = await run(cluster, "check", group, *narrowed, *WINDOW, "--json")
    assert code == 2, err
    assert {f["topic"] for f in json.loads(out)} == {topics[0], topics[2]}


def registration(subscription: str, pattern: str, **extra: str) -> bytes:
    """A registration as Kafka's ZooKeeper consumer wrote it, with ``extra`` fields."""
    doc = {
        "version": 1,
        "subscription": {subscription: 1},
        "pattern": pattern,
        "timestamp": "1764720000000",
        **extra,
    }
    return json.dumps(doc).encode()


async def test_pattern_and_named_registrations_are_shown_and_respected(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, group_name: str
) -> None:
    matched, other = await make_topic(partitions=1), await make_topic(partitions=1)
    await zk.create(GroupLayout(group_name, matched).offset(0), b"0", makepath=True)
    ids = GroupLayout(group_name, matched).ids
    # A white list of the first topic (brackets, as a regular expression may hold: never read
    # as rich markup) by a named member, and a black list of the second topic.
    white = re.escape(matched[:-1]) + "[" + matched[-1] + "]"
    assert re.fullmatch(white, matched)
    assert not re.fullmatch(white, other)
    await zk.create(
        f"{ids}/pattern-member",
        registration(white, "white_list", name="orders-3"),
        ephemeral=True,
        makepath=True,
    )
    await zk.create(
        f"{ids}/black-member", registration(re.escape(other), "black_list"), ephemeral=True
    )
    # The Kafka ZooKeeper consumer's own example: events by a pattern.
    await zk.create(
        f"{ids}/events-member",
        registration("events\\..*", "white_list", name="x"),
        ephemeral=True,
    )

    code, out, err = await run(cluster, "describe", group_name)
    assert code == 0, err
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert lines["pattern-member"].split()[1] == "orders-3"
    assert f"white_list {white}" in lines["pattern-member"]
    assert f"black_list {re.escape(other)}" in lines["black-member"]
    assert "white_list events\\..*" in lines["events-member"]

    code, out, err = await run(cluster, "describe", group_name, "--members", "--json")
    assert code == 0, err
    members = {entry["member"]: entry for entry in json.loads(out)}
    assert members["pattern-member"] == {
        "member": "pattern-member",
        "name": "orders-3",
        "host": None,
        "rack": None,
        "since": "2025-12-03T00:00:00+00:00",
        "strategy": "range",
        "pattern": "white_list",
        "subscription": [white],
        "partitions": 0,
    }
    assert members["events-member"]["name"] == "x"
    assert members["events-member"]["subscription"] == ["events\\..*"]
    assert members["black-member"]["name"] is None
    assert members["black-member"]["pattern"] == "black_list"

    # The patterns are no topics: the group's topic is the one it holds offsets of.
    code, out, err = await run(cluster, "describe", group_name, "--json")
    assert code == 0, err
    assert [row["topic"] for row in json.loads(out)] == [matched]
    code, out, err = await run(cluster, "list", "--json")
    assert code == 0, err
    assert {"group": group_name, "topics": [matched], "members": 3} in json.loads(out)

    # A reset is refused for the members whose pattern takes the topic, and only for them.
    args = ("reset-offsets", group_name, "--to-earliest", "--execute")
    code, _out, err = await run(cluster, *args, "--topic", matched)
    assert code == 1
    assert "2 member(s) registered" in one_line(err)
    assert "(black-member, pattern-member)" in err
    code, _out, err = await run(cluster, *args, "--topic", other)
    assert code == 0, err

    # An unreadable registration is shown as such, and is assumed to read every topic.
    await zk.create(f"{ids}/garbage-member", b"not json", ephemeral=True)
    code, out, err = await run(cluster, "describe", group_name)
    assert code == 0, err
    assert "unreadable registration" in out
    code, _out, err = await run(cluster, *args, "--topic", other)
    assert code == 1
    assert "(garbage-member)" in one_line(err)


async def agree_with_kafka(
    cluster: LocalCluster, zk: ZooKeeper, group: str, topics: list[str]
) -> dict[tuple[str, int], tuple[int, int, int]]:
    """Once the offsets stored in ZooKeeper for ``topics`` reached Kafka: ``describe --json``
    and Kafka's own tool show the same rows; returns them."""
    in_zookeeper = {
        topic: await stored_offsets(zk, GroupLayout(group, topic), 2) for topic in topics
    }

    async def mirrored() -> bool:
        held = {topic: await in_kafka(cluster, group, topic) for topic in topics}
        return held == in_zookeeper

    await wait_until(mirrored, what="the offsets of every topic to reach Kafka")
    code, out, err = await run(cluster, "describe", group, "--json")
    assert code == 0, err
    ours = {
        (row["topic"], row["partition"]): (row["committed"], row["end"], row["lag"])
        for row in json.loads(out)
    }
    theirs = await kafka_tool_describe(cluster, group)
    assert theirs == ours
    assert {key: current for key, (current, _end, _lag) in theirs.items()} == {
        (topic, p): in_zookeeper[topic][p] for topic in topics for p in (0, 1)
    }
    return theirs


async def test_kafkas_own_tool_and_describe_agree_on_every_topic_of_a_mirrored_group(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
) -> None:
    topics = sorted([await make_topic(partitions=2) for _ in range(2)])
    for topic in topics:
        await produce(topic, 30)
    async with contextlib.AsyncExitStack() as stack:
        for topic in topics:
            one = await stack.enter_async_context(
                member(cluster, group_name, topic, kafka_offsets="mirror")
            )
            await consume_and_commit(one, 30)
            await produce(topic, 10, start=30)
        theirs = await agree_with_kafka(cluster, zk, group_name, topics)
    assert all(lag > 0 for _current, _end, lag in theirs.values())


@pytest.mark.asyncio
async def test_kafkas_tool_and_describe_agree_on_a_member_subscribed_to_three_topics(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
) -> None:
    """One member on a list of three topics (one ZooKeeper session, one fetcher), its offsets
    mirrored: Kafka's own tool and ``describe`` show the same for every topic."""
    topics = sorted([await make_topic(partitions=2) for _ in range(3)])
    for topic in topics:
        await produce(topic, 20)
    group = ConsumerGroup(
        group_name,
        cluster.bootstrap,
        cluster.zookeeper,
        topics,
        kafka_offsets="mirror",
        loop_delay=0.1,
        kafka_options=cluster.kafka_options or None,
    )
    async with group:
        seen: Counter[str] = Counter()
        async with contextlib.aclosing(closable(group.batches(commit=False))) as batches:
            async for tp, batch in batches:
                await group.commit(tp, batch[-1].offset + 1)
                seen[tp.topic] += len(batch)
                if sum(seen.values()) == 60:
                    break
        assert seen == dict.fromkeys(topics, 20)
        for topic in topics:
            await produce(topic, 5, start=20)
        theirs = await agree_with_kafka(cluster, zk, group_name, topics)
    assert set(theirs) == {(topic, p) for topic in topics for p in (0, 1)}
    assert sum(lag for _current, _end, lag in theirs.values()) == 15
