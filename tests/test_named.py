"""Named members (``member_name``, ``rejoin_grace``): a restart under the same name gets exactly
its partitions back and moves nobody else's; a newer member under a taken name takes it over and
the older one stops. The pure rules first, then the real servers."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections import Counter
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions

from aio_cluster import ConfigurationError, ConsumerGroup, MemberReplacedError, Strategy
from aio_cluster.assign.target import StickyTarget, follows, grace_ends, next_target
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import (
    GroupLayout,
    decode_registration,
    decode_target,
    encode_registration,
    encode_target,
)
from aio_cluster.zookeeper.values import Stat

from conftest import MakeTopic, Produce
from support import Worker, closable, member, numbered_by, settled, take, wait_until

MEMBERS = ["a", "b", "n"]


def _first() -> StickyTarget:
    target = next_target(None, range(12), MEMBERS, graces={"n": 30.0}, now_ms=1_000)
    assert target is not None
    return target


def test_a_named_member_in_its_grace_keeps_its_partitions_and_gets_them_back() -> None:
    first = _first()
    gone = next_target(first, range(12), ["a", "b"], now_ms=2_000)
    assert gone is not None
    assert gone.owners == first.owners, "nothing moves when a named member goes"
    assert gone.absent == {"n": 32_000}
    assert grace_ends(gone) == 32_000
    assert follows(gone, ["a", "b"]), "a member in its grace does not count as live"
    assert next_target(gone, range(12), ["a", "b"], now_ms=31_999) is None
    back = next_target(gone, range(12), ["a", "b", "n"], graces={"n": 30.0}, now_ms=5_000)
    assert back is not None
    assert back.owners == first.owners, "nothing moves when it comes back"
    assert back.absent == {}
    assert back.graces == {"n": 30.0}


def test_past_its_grace_a_named_members_partitions_are_spread_as_at_a_leave() -> None:
    first = _first()
    gone = next_target(first, range(12), ["a", "b"], now_ms=2_000)
    assert gone is not None
    past = next_target(gone, range(12), ["a", "b"], now_ms=32_000)
    assert past is not None
    assert past.members == ("a", "b")
    assert past.absent == past.graces == {}
    moved = {p for p in range(12) if past.owners[p] != first.owners[p]}
    assert moved == set(first.partitions_of("n")), "only the leaver's partitions move"
    assert sorted(Counter(past.owners.values()).values()) == [6, 6]


def test_a_member_without_grace_is_spread_at_once() -> None:
    first = next_target(None, range(12), MEMBERS, now_ms=1_000)
    assert first is not None
    gone = next_target(first, range(12), ["a", "b"], now_ms=2_000)
    assert gone is not None
    assert gone.absent == {}
    assert "n" not in gone.members


def test_graces_and_names_survive_their_nodes() -> None:
    first = _first()
    gone = next_target(first, range(12), ["a", "b"], now_ms=2_000)
    assert gone is not None
    assert decode_target(encode_target(gone)) == gone
    info = decode_registration(
        encode_registration("t", Strategy.STICKY, 5, name="n", rejoin_grace=30.0)
    )
    assert (info.name, info.rejoin_grace) == ("n", 30.0)
    plain = decode_registration(encode_registration("t", Strategy.STICKY, 5))
    assert (plain.name, plain.rejoin_grace) == (None, None)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"member_name": ""}, "member name ''"),
        ({"member_name": "orders/3"}, "member name 'orders/3'"),
        ({"member_name": ".."}, "member name '..'"),
        ({"member_name": 3}, "member name 3"),
        ({"member_name": "n", "rejoin_grace": -1.0}, "rejoin_grace"),
        ({"member_name": "n", "rejoin_grace": "30"}, "rejoin_grace"),
        ({"rejoin_grace": 30.0}, "rejoin_grace needs a member_name"),
        ({"member_name": "n", "rejoin_grace": 30.0, "strategy": "range"}, "sticky"),
    ],
)
async def test_bad_names_and_graces_are_refused_at_construction(
    options: dict[str, object], named: str
) -> None:
    with pytest.raises(ConfigurationError, match=named.replace("/", ".")):
        ConsumerGroup("g", "localhost:9", "localhost:9", "t", **options)  # type: ignore[call-overload]


# --- against the real servers ---------------------------------------------------------------------


async def _claims(
    zk: ZooKeeper, layout: GroupLayout, partitions: int
) -> dict[int, tuple[str, Stat]]:
    """partition -> (owner id, owner node's stat), for the claimed ones."""
    found = {}
    for partition in range(partitions):
        with contextlib.suppress(Exception):
            data, stat = await zk.get(layout.owner(partition))
            found[partition] = (data.decode(), stat)
    return found


def _lines(*paths: Path) -> Counter[str]:
    keys: Counter[str] = Counter()
    for path in paths:
        if path.exists():
            keys.update(line.split()[2] for line in path.read_text().splitlines())
    return keys


@pytest.mark.asyncio
async def test_a_named_member_killed_and_restarted_gets_its_partitions_back(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    producer: AIOKafkaProducer,
    group_name: str,
    tmp_path: Path,
) -> None:
    topic = await make_topic(6)
    layout = GroupLayout(group_name, topic)
    produce = numbered_by(producer, topic)
    seen: Counter[str] = Counter()

    async def consume(group: ConsumerGroup) -> None:
        async for _, batch in group:
            seen.update(record.key.decode() for record in batch if record.key is not None)

    others = [member(cluster, group_name, topic, loop_delay=0.05) for _ in range(2)]
    before_kill, after_restart = Worker(tmp_path / "w1.txt"), Worker(tmp_path / "w2.txt")
    async with contextlib.AsyncExitStack() as stack:
        for group in others:
            await stack.enter_async_context(group)
        consumers = [asyncio.ensure_future(consume(group)) for group in others]
        stack.callback(lambda: [c.cancel() for c in consumers])
        # A session far longer than the test: the old run's claims cannot expire meanwhile.
        await before_kill.start(cluster, topic, group_name, "auto", 60.0, name="svc-1", grace=60)
        stack.callback(before_kill.kill)

        async def all_claimed() -> bool:
            return len(await _claims(zk, layout, 6)) == 6

        await wait_until(all_claimed, what="six partitions claimed")
        before = await _claims(zk, layout, 6)
        mine = {p for p, (owner, _stat) in before.items() if owner == "svc-1"}
        assert len(mine) == 2
        await produce(0, 300)
        await wait_until(
            lambda: len(seen) + len(_lines(before_kill.out)) >= 300, what="the first 300"
        )

        before_kill.kill()
        await before_kill.reap()
        await asyncio.sleep(2.0)  # the restart: back 2 s later, its old session still alive
        await after_restart.start(cluster, topic, group_name, "auto", 60.0, name="svc-1", grace=60)
        stack.callback(after_restart.kill)

        async def taken_back() -> bool:
            now = await _claims(zk, layout, 6)
            return all(now[p][1].ephemeral_owner != before[p][1].ephemeral_owner for p in mine)

        await wait_until(taken_back, what="the restarted member's claims")
        after = await _claims(zk, layout, 6)
        assert {p for p, (owner, _stat) in after.items() if owner == "svc-1"} == mine
        for partition in set(range(6)) - mine:
            assert after[partition][1].czxid == before[partition][1].czxid, (
                f"partition {partition} of another member moved"
            )
        await produce(300, 300)
        wanted = {f"k{i}" for i in range(600)}
        await wait_until(
            lambda: set(seen) | set(_lines(before_kill.out, after_restart.out)) >= wanted,
            what="all 600 messages",
        )
        await after_restart.leave()


@pytest.mark.asyncio
async def test_past_its_grace_a_named_members_partitions_are_spread(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    group_name: str,
    tmp_path: Path,
) -> None:
    topic = await make_topic(6)
    layout = GroupLayout(group_name, topic)
    others = [member(cluster, group_name, topic) for _ in range(2)]
    worker = Worker(tmp_path / "w.txt")
    async with others[0], others[1]:
        await worker.start(cluster, topic, group_name, "auto", 4.0, name="svc-1", grace=1.0)
        try:
            await wait_until(
                lambda: sum(len(m.claimed) for m in others) == 4, what="four claimed by others"
            )
            kept = {m.id: set(m.claimed) for m in others}
            worker.kill()
            await worker.reap()
        finally:
            worker.kill()
        await wait_until(lambda: settled(zk, others), timeout=60, what="the others own all six")
        assert sorted(len(m.claimed) for m in others) == [3, 3]
        for group in others:
            assert kept[group.id] <= set(group.claimed), "a member kept what it had"
        data, _stat = await zk.get(layout.assignment)
        assert "svc-1" not in decode_target(data).members


@pytest.mark.asyncio
async def test_a_second_live_member_under_a_taken_name_takes_over(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, group_name: str
) -> None:
    topic = await make_topic(4)
    layout = GroupLayout(group_name, topic)
    other = member(cluster, group_name, topic)
    first = member(cluster, group_name, topic, member_name="twin", rejoin_grace=30.0)
    async with other, first:
        await wait_until(lambda: settled(zk, [other, first]), what="two settle")
        held = set(first.claimed)
        theirs = await _claims(zk, layout, 4)
        batches = closable(first.batches())

        async def drain() -> None:
            async for _ in batches:
                pass

        draining = asyncio.ensure_future(drain())
        second = member(cluster, group_name, topic, member_name="twin", rejoin_grace=30.0)
        async with second:
            with pytest.raises(MemberReplacedError, match="'twin'") as raised:
                await asyncio.wait_for(draining, 30)
            assert raised.value.name == "twin"
            await wait_until(lambda: settled(zk, [other, second]), what="the newer one owns")
            assert set(second.claimed) == held
            now = await _claims(zk, layout, 4)
            for partition in set(range(4)) - held:
                assert now[partition][1].czxid == theirs[partition][1].czxid
            await batches.aclose()
            await first.close()
            # The older member left nothing behind and did not come back.
            _data, registration = await zk.get(layout.member("twin"))
            assert (await zk.get_children(layout.ids)).count("twin") == 1
            await wait_until(lambda: settled(zk, [other, second]), what="still the newer one's")
            _data, again = await zk.get(layout.member("twin"))
            assert again.czxid == registration.czxid


@pytest.mark.asyncio
async def test_a_replaced_member_stops_at_once_while_its_rebalance_is_busy(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, group_name: str
) -> None:
    """The older member's rebalance is held up (as by a listener taking its time), so only the
    watch on its registration can tell it: it stops handing out batches, and its iteration
    raises, before any rebalance of its own ran."""
    topic = await make_topic(2)
    first = member(cluster, group_name, topic, member_name="twin", rejoin_grace=30.0)
    async with first:
        await wait_until(lambda: first.claimed == [0, 1], what="the first owns both")
        batches = closable(first.batches())

        async def drain() -> None:
            async for _ in batches:
                pass

        draining = asyncio.ensure_future(drain())
        rebalances = first._member.parts.membership.rebalances
        busy = first._member.parts.membership._lock
        await busy.acquire()
        second = member(cluster, group_name, topic, member_name="twin", rejoin_grace=30.0)
        async with second:
            try:
                with pytest.raises(MemberReplacedError, match="'twin'"):
                    await asyncio.wait_for(draining, 30)
                assert first._member.parts.membership.rebalances == rebalances, (
                    "no rebalance of its own ran"
                )
                assert first._member.parts.states.pick() is None, "nothing more is handed out"
            finally:
                busy.release()
            await batches.aclose()
            await first.close()
            await wait_until(lambda: second.claimed == [0, 1], what="the newer one owns")


@pytest.mark.asyncio
async def test_a_graceful_restart_under_the_same_name_moves_nothing(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, group_name: str
) -> None:
    topic = await make_topic(6)
    layout = GroupLayout(group_name, topic)

    def named(name: str) -> ConsumerGroup:
        return member(cluster, group_name, topic, member_name=name, rejoin_grace=60.0)

    stay = [named("m-0"), named("m-1")]
    leaving = named("m-2")
    async with stay[0], stay[1]:
        async with leaving:
            await wait_until(lambda: settled(zk, [*stay, leaving]), what="three settle")
            held = set(leaving.claimed)
            before = await _claims(zk, layout, 6)

        # Gone: its partitions wait for it, claimed by nobody.
        async def target() -> StickyTarget:
            data, _stat = await zk.get(layout.assignment)
            return decode_target(data)

        async def in_grace() -> bool:
            return "m-2" in (await target()).absent

        await wait_until(in_grace, what="the leaver in its grace")
        assert set((await target()).partitions_of("m-2")) == held
        assert not set(await _claims(zk, layout, 6)) & held
        assert [set(m.claimed) for m in stay] == [
            {p for p, (o, _s) in before.items() if o == m.id} for m in stay
        ]
        async with named("m-2") as back:
            await wait_until(lambda: settled(zk, [*stay, back]), what="back, settled")
            assert set(back.claimed) == held
            after = await _claims(zk, layout, 6)
            for partition in set(range(6)) - held:
                assert after[partition][1].czxid == before[partition][1].czxid


@pytest.mark.asyncio
async def test_a_member_in_its_grace_is_given_no_leavers_nor_new_partitions(
    cluster: LocalCluster,
    zk: ZooKeeper,
    admin: AIOKafkaAdminClient,
    make_topic: MakeTopic,
    group_name: str,
) -> None:
    """While a named member is away in its grace, another member's leave and new partitions
    go to the member present; the one away keeps only its own, which nobody claims."""
    topic = await make_topic(6)
    layout = GroupLayout(group_name, topic)

    async def target() -> StickyTarget:
        data, _stat = await zk.get(layout.assignment)
        return decode_target(data)

    stay = member(
        cluster, group_name, topic, member_name="m-0", rejoin_grace=60.0, metadata_interval=0.3
    )
    async with stay:
        plain = member(cluster, group_name, topic)
        async with plain:
            async with member(cluster, group_name, topic, member_name="m-2", rejoin_grace=60.0):
                await wait_until(lambda: len(stay.claimed) == 2, what="three settle")
                held = set((await target()).partitions_of("m-2"))
                assert len(held) == 2

            async def in_grace() -> bool:
                return "m-2" in (await target()).absent

            await wait_until(in_grace, what="m-2 in its grace")

        async def left() -> bool:
            return plain.id not in (await target()).members

        await wait_until(left, what="the target without the plain member")
        assert set((await target()).partitions_of("m-2")) == held, "m-2 got the leaver's"
        await wait_until(lambda: set(stay.claimed) == set(range(6)) - held, what="m-0 has them")

        await admin.create_partitions({topic: NewPartitions(total_count=9)})

        async def grown() -> bool:
            return sorted((await target()).owners) == list(range(9))

        await wait_until(grown, what="the new partitions in the target")
        assert set((await target()).partitions_of("m-2")) == held, "m-2 got a new partition"
        await wait_until(lambda: set(stay.claimed) == set(range(9)) - held, what="m-0 has them")
        assert not set(await _claims(zk, layout, 9)) & held, "a partition of m-2 was claimed"


@pytest.mark.asyncio
async def test_a_named_member_frozen_past_its_session_comes_back_under_its_name(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, group_name: str, tmp_path: Path
) -> None:
    """Its registration went with its session, not to another member: it registers again (it
    is not replaced), and its partitions come back to it within the grace."""
    topic = await make_topic(4)
    layout = GroupLayout(group_name, topic)
    other = member(cluster, group_name, topic)
    worker = Worker(tmp_path / "w.txt")
    async with other:
        await worker.start(cluster, topic, group_name, "auto", 4.0, name="svc-1", grace=60.0)
        try:
            assert worker.process is not None
            await wait_until(lambda: len(other.claimed) == 2, what="two each")
            _data, before = await zk.get(layout.member("svc-1"))
            worker.process.send_signal(signal.SIGSTOP)
            try:

                async def expired() -> bool:
                    return "svc-1" not in await zk.get_children(layout.ids)

                await wait_until(expired, timeout=60, what="the frozen member's session expires")
            finally:
                worker.process.send_signal(signal.SIGCONT)

            async def back() -> bool:
                claims = await _claims(zk, layout, 4)
                return (
                    len(claims) == 4 and sorted(o for o, _s in claims.values()).count("svc-1") == 2
                )

            await wait_until(back, timeout=60, what="the thawed member back with its partitions")
            _data, again = await zk.get(layout.member("svc-1"))
            assert again.czxid != before.czxid, "registered again"
            assert worker.process.returncode is None, "it did not stop"
            await worker.leave()
        finally:
            worker.kill()
            await worker.reap()


@pytest.mark.asyncio
async def test_a_named_members_registration_deleted_by_another_session_is_made_again(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
) -> None:
    """Gone is not taken over: a named member whose registration another session deleted
    (a tool, or its own expired session) registers again and goes on; it stops only when another
    registration holds its name."""
    topic = await make_topic(2)
    layout = GroupLayout(group_name, topic)
    async with member(cluster, group_name, topic, member_name="svc-1", rejoin_grace=30.0) as one:
        _data, before = await zk.get(layout.member("svc-1"))
        await zk.delete(layout.member("svc-1"))

        async def registered_again() -> bool:
            stat = await zk.exists(layout.member("svc-1"))
            return stat is not None and stat.czxid != before.czxid

        await wait_until(registered_again, what="the registration made again")
        await produce(topic, 4)
        batches = closable(one.batches())
        try:
            assert len(await take(batches, 4)) == 4, "it goes on consuming"
        finally:
            await batches.aclose()
