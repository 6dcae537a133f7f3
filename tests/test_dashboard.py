"""The dashboard over HTTP against the real servers: the pages show what ``describe`` reads, the
event stream sends fragments, and writes are refused without ``--allow-writes`` and the token,
while with both a reset planned on the page stores exactly the planned offsets, and a pause,
resume or skip is planned, shown, written with who and when, logged and kept in the history."""

from __future__ import annotations

import contextlib
import html
import json
import logging
import re
import socket
import time
from collections.abc import AsyncIterator

import anyio
import httpx
import pytest
import pytest_asyncio

from aio_cluster.control.model import Controls, Stopped
from aio_cluster.control.store import ControlStore
from aio_cluster.dashboard import Dashboard
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from conftest import MakeTopic, Produce
from dashboard_support import consuming, dashboard_of, served
from support import member, stored_offsets, wait_until

pytestmark = pytest.mark.asyncio

TOKEN = "token-for-the-test"


@pytest_asyncio.fixture
async def stored_group(
    zk: ZooKeeper, make_topic: MakeTopic, produce: Produce, group_name: str
) -> str:
    """A group without members whose offsets are stored at 0 of a topic of 2 partitions with
    10 records: a lag of 10, and nobody to take it."""
    topic = await make_topic(partitions=2)
    await produce(topic, 10)
    layout = GroupLayout(group_name, topic)
    for partition in (0, 1):
        await zk.ensure_path(layout.offsets)
        await zk.create(layout.offset(partition), b"0")
    return topic


@contextlib.asynccontextmanager
async def client_of(dashboard: Dashboard) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client of ``dashboard``'s app, the dashboard running meanwhile."""
    async with (
        dashboard,
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=dashboard.app), base_url="http://dashboard"
        ) as client,
    ):
        yield client


async def shown(client: httpx.AsyncClient, path: str, text: str) -> str:
    """The page at ``path`` once it contains ``text``."""
    found = ""

    async def has() -> bool:
        nonlocal found
        found = (await client.get(path)).text
        return text in found

    await wait_until(has, what=f"{text!r} on {path}")
    return found


async def test_the_pages_show_a_groups_members_lag_and_verdict(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, group_name: str
) -> None:
    topic = await make_topic(partitions=2)
    await produce(topic, 20)
    async with (
        consuming(cluster, group_name, topic) as member,
        client_of(dashboard_of(cluster, group_name)) as client,
    ):
        listed = await shown(client, "/", "ZooKeeper and Kafka answered")
        assert f'data-group="{group_name}"' in listed
        page = await shown(client, f"/groups/{group_name}", 'id="total-lag">0<')
        assert f'data-member="{member.id}"' in page
        assert page.count("<tr data-partition=") == 2
        assert re.search(r'class="n claimed">2<', page)
        assert "Read-only" in page
        page = await shown(client, f"/groups/{group_name}", 'class="verdict ok"')
        static = await client.get("/static/dashboard.js")
        assert static.status_code == 200
        assert "EventSource" in static.text


async def test_the_event_stream_sends_the_fragments(
    cluster: LocalCluster, stored_group: str, group_name: str
) -> None:
    """Over uvicorn, as ``aio-cluster dashboard`` serves it (httpx's in-process transport
    waits for a response's end, which an event stream never reaches)."""
    async with served(dashboard_of(cluster, group_name)) as url, httpx.AsyncClient() as client:
        await shown(client, f"{url}/groups/{group_name}", "data-partition=")
        with anyio.fail_after(30):
            async with client.stream("GET", f"{url}/groups/{group_name}/events?size=50") as events:
                assert events.headers["content-type"].startswith("text/event-stream")
                lines = events.aiter_lines()
                assert await anext(lines) == "event: update"
                data = await anext(lines)
                assert await anext(lines) == ""
                assert await anext(lines) == "event: update", "again after the next refresh"
    fragments = json.loads(data.removeprefix("data: "))
    assert set(fragments) == {
        "status",
        "summary",
        "members",
        "charts",
        "partitions",
        "events",
        "timeline",
    }
    assert fragments["partitions"].count("<tr data-partition=") == 2


async def test_writes_are_refused_without_allow_writes_or_the_token(
    cluster: LocalCluster, stored_group: str, group_name: str
) -> None:
    form = {"topic": stored_group, "target": "latest", "value": "", "token": TOKEN}
    async with client_of(dashboard_of(cluster, group_name)) as client:
        await shown(client, f"/groups/{group_name}", "data-partition=")
        refused = await client.post(f"/groups/{group_name}/reset", data=form)
        assert refused.status_code == 403
        assert "read-only" in refused.text
    async with client_of(dashboard_of(cluster, group_name, write_token=TOKEN)) as client:
        await shown(client, f"/groups/{group_name}", "data-partition=")
        wrong = await client.post(f"/groups/{group_name}/reset", data={**form, "token": "guess"})
        assert wrong.status_code == 403
        assert "guess" not in wrong.text
        assert TOKEN not in (await client.get(f"/groups/{group_name}")).text


async def test_a_reset_from_the_page_stores_the_planned_offsets(
    cluster: LocalCluster, zk: ZooKeeper, stored_group: str, group_name: str
) -> None:
    layout = GroupLayout(group_name, stored_group)
    form = {"topic": stored_group, "target": "latest", "value": "", "token": TOKEN}
    async with client_of(dashboard_of(cluster, group_name, write_token=TOKEN)) as client:
        page = await shown(client, f"/groups/{group_name}", "data-partition=")
        assert 'action="/groups/' in page
        assert "Read-only" not in page
        planned = await client.post(f"/groups/{group_name}/reset", data=form)
        assert planned.status_code == 200
        plan = {
            int(p): int(new.replace(",", ""))
            for p, new in re.findall(
                r'<tr data-partition="(\d+)">.*?class="n new">([\d,]+)<', planned.text
            )
        }
        assert sum(plan.values()) == 10, "to the log end of both partitions"
        assert await stored_offsets(zk, layout, 2) == {0: 0, 1: 0}, "a plan stores nothing"
        (action,) = re.findall(r'action="(/groups/[^"]+/reset/\w+)"', planned.text)
        without = await client.post(action, data={"token": ""})
        assert without.status_code == 403
        stored = await client.post(action, data={"token": TOKEN})
        assert stored.status_code == 200, stored.text
        assert "stored the new offsets of 2 partition(s)" in stored.text
        assert await stored_offsets(zk, layout, 2) == plan
        again = await client.post(action, data={"token": TOKEN})
        assert again.status_code == 409, "a plan is stored once"


async def test_a_reset_is_refused_while_members_may_read_the_topic_unless_forced(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, produce: Produce, group_name: str
) -> None:
    topic = await make_topic(partitions=1)
    await produce(topic, 4)
    form = {"topic": topic, "target": "earliest", "value": "", "token": TOKEN}
    async with (
        consuming(cluster, group_name, topic),
        client_of(dashboard_of(cluster, group_name, write_token=TOKEN)) as client,
    ):
        await shown(client, f"/groups/{group_name}", 'class="n claimed">1<')
        planned = await client.post(f"/groups/{group_name}/reset", data=form)
        assert "1 member(s) registered" in planned.text
        (action,) = re.findall(r'action="(/groups/[^"]+/reset/\w+)"', planned.text)
        refused = await client.post(action, data={"token": TOKEN})
        assert refused.status_code == 409
        assert "Stop them first" in refused.text
        forced = await client.post(action, data={"token": TOKEN, "force": "1"})
        assert forced.status_code in (200, 409), forced.text
        # 409 only where the member stored an offset between the plan and the write: then
        # nothing was stored, as the page says.
        if forced.status_code == 409:
            assert "plan again" in forced.text


def control_action(page: str) -> str:
    """The action of the form that applies the plan ``page`` shows."""
    found = re.search(r'action="(/groups/[^"]+/control/\w+)"', page)
    assert found is not None, page
    return found[1]


async def test_pause_and_resume_from_the_page_are_planned_written_logged_and_shown(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = await make_topic(partitions=2)
    await produce(topic, 10)
    store = ControlStore(zk, group_name)
    caplog.set_level(logging.WARNING, logger="aio_cluster.dashboard")
    async with (
        member(cluster, group_name, topic, member_name="web"),
        client_of(dashboard_of(cluster, group_name, write_token=TOKEN)) as client,
    ):
        page = await shown(client, f"/groups/{group_name}", 'class="n claimed">2<')
        assert f"<td>{socket.gethostname()}</td>" in page, "the host the named member registered"
        assert f'value="pause:{topic}:1"' in page
        form = {"act": f"pause:{topic}:1", "token": TOKEN}
        planned = await client.post(f"/groups/{group_name}/control", data=form)
        assert planned.status_code == 200, planned.text
        assert f"Plan: pause {topic}/1" in planned.text
        assert "web" in planned.text, "the plan names the owner"
        assert (await store.read()).paused == {}, "a plan writes nothing"
        action = control_action(planned.text)
        assert (await client.post(action, data={"token": "guess"})).status_code == 403
        assert (await store.read()).paused == {}
        applied = await client.post(action, data={"token": TOKEN})
        assert applied.status_code == 200, applied.text
        pause = (await store.read()).paused[(topic, 1)]
        assert pause.by == "dashboard 127.0.0.1"
        assert (await client.post(action, data={"token": TOKEN})).status_code == 409, "once"
        # The history is read before the controls, so it may lag them by a refresh, never run
        # ahead: once it shows the write, the partition shows paused.
        page = await shown(client, f"/groups/{group_name}", 'data-action="pause"')
        assert 'class="badge paused"' in page
        assert f'value="resume:{topic}:1"' in page
        planned = await client.post(
            f"/groups/{group_name}/control", data={"act": f"resume:{topic}:1", "token": TOKEN}
        )
        assert "by dashboard 127.0.0.1 at" in planned.text, "who paused it, and when"
        applied = await client.post(control_action(planned.text), data={"token": TOKEN})
        assert applied.status_code == 200, applied.text
        assert (await store.read()).paused == {}
        page = await shown(client, f"/groups/{group_name}", 'data-action="resume"')
        assert 'class="badge paused"' not in page
    written = [r.getMessage() for r in caplog.records if "127.0.0.1" in r.getMessage()]
    assert any(f"paused {topic}/1 of group {group_name}" in m for m in written), written
    assert any(f"resumed {topic}/1 of group {group_name}" in m for m in written), written
    assert any("refused: the token" in m for m in written), written


async def test_controls_are_refused_read_only_without_the_token_and_on_bad_input(
    cluster: LocalCluster, zk: ZooKeeper, stored_group: str, group_name: str
) -> None:
    """No buttons and a refused POST on a read-only dashboard; with writes allowed, a wrong
    token, an unknown topic or partition, a skip on a partition nobody owns or not stopped:
    refused, saying why, and nothing written."""
    store = ControlStore(zk, group_name)
    url = f"/groups/{group_name}/control"
    form = {"act": f"pause:{stored_group}:0", "token": TOKEN}
    async with client_of(dashboard_of(cluster, group_name)) as client:
        page = await shown(client, f"/groups/{group_name}", "data-partition=")
        assert "control-form" not in page, "no buttons"
        refused = await client.post(url, data=form)
        assert refused.status_code == 403
        assert "read-only" in refused.text
    async with client_of(dashboard_of(cluster, group_name, write_token=TOKEN)) as client:
        await shown(client, f"/groups/{group_name}", "data-partition=")
        assert (await client.post(url, data={**form, "token": "guess"})).status_code == 403
        refusals = {
            "pause:nope:0": "does not read topic 'nope'",
            f"pause:{stored_group}:7": "has no partition 7",
            f"skip:{stored_group}:0": f"no member owns {stored_group}/0",
            "bogus": "no such control",
        }
        for act, why in refusals.items():
            answer = await client.post(url, data={**form, "act": act})
            assert answer.status_code == 400, (act, answer.text)
            assert why in html.unescape(answer.text), (act, answer.text)
        plan = await client.post(f"/groups/elsewhere-{group_name}/control", data=form)
        assert plan.status_code == 400
        assert "does not exist" in plan.text
    assert await store.read() == Controls()
    assert await store.history() == []


async def test_a_second_operators_write_first_leaves_the_plan_unwritten(
    cluster: LocalCluster, zk: ZooKeeper, stored_group: str, group_name: str
) -> None:
    """Two plans of the same pause, shown to two operators: the second to apply it is told
    the partition changed since its plan, and nothing more is written."""
    store = ControlStore(zk, group_name)
    form = {"act": f"pause:{stored_group}:0", "token": TOKEN}
    async with client_of(dashboard_of(cluster, group_name, write_token=TOKEN)) as client:
        await shown(client, f"/groups/{group_name}", "data-partition=")
        first = await client.post(f"/groups/{group_name}/control", data=form)
        second = await client.post(f"/groups/{group_name}/control", data=form)
        assert (await client.post(control_action(first.text), data=form)).status_code == 200
        late = await client.post(control_action(second.text), data=form)
        assert late.status_code == 409
        assert "changed since the plan was made: nothing was written" in late.text
    assert list((await store.read()).paused) == [(stored_group, 0)]
    assert [e.action for e in await store.history()] == ["pause"]


async def test_a_skip_from_the_page_names_the_stopped_record_and_asks_its_owner(
    cluster: LocalCluster, zk: ZooKeeper, stored_group: str, group_name: str
) -> None:
    """Partition 0 claimed (a claim node written here, no member to apply the skip) and stopped
    on offset 0: the plan names the record, its error and its owner, and goes just past it;
    applied, the skip is requested for the owner and in the history. A skip backwards, or
    without an offset on a partition that is not stopped, is refused at the plan."""
    layout = GroupLayout(group_name, stored_group)
    store = ControlStore(zk, group_name)
    await zk.ensure_path(layout.owners)
    await zk.create(layout.owner(0), b"worker-1", ephemeral=True)
    await zk.create(layout.owner(1), b"worker-1", ephemeral=True)
    await store.publish_stopped(
        Stopped(stored_group, 0, "worker-1", 0, "ValueError: poison", time.time())
    )
    url = f"/groups/{group_name}/control"
    async with client_of(dashboard_of(cluster, group_name, write_token=TOKEN)) as client:
        page = await shown(client, f"/groups/{group_name}", 'class="badge stopped"')
        assert "on offset 0: ValueError: poison" in page
        for act, to_offset, why in [
            (f"skip:{stored_group}:1", "", "is not stopped on a record"),
            (f"skip:{stored_group}:1", "0", "a skip only moves forward"),
            (f"skip:{stored_group}:1", "99", "past"),
        ]:
            form = {"act": act, "to_offset": to_offset, "token": TOKEN}
            refused = await client.post(url, data=form)
            assert refused.status_code == 400, refused.text
            assert why in html.unescape(refused.text)
        form = {"act": f"skip:{stored_group}:0", "token": TOKEN}
        planned = await client.post(url, data=form)
        assert planned.status_code == 200, planned.text
        assert "ValueError: poison" in planned.text
        assert f"The owner, worker-1, moves {stored_group}/0 to offset 1" in planned.text
        assert (await store.read()).skips == {}, "a plan writes nothing"
        applied = await client.post(control_action(planned.text), data={"token": TOKEN})
        assert applied.status_code == 200, applied.text
        assert "skip to offset 1" in applied.text
    skip = (await store.read()).skips[(stored_group, 0)]
    assert (skip.target, skip.stopped_on, skip.by) == (1, 0, "dashboard 127.0.0.1")
    assert [e.action for e in await store.history()] == ["skip-requested"]
