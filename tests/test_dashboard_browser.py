"""The dashboard in a real browser: Playwright drives the machine's Chromium against the
dashboard served by uvicorn, on the real servers. The page follows the group live (event stream,
no reload): members joining and leaving, lag falling to 0, partitions moving in the timeline, an
unowned partition's verdict, ZooKeeper or Kafka going away and coming back, and an operator's
pause and resume made from the page (only with the token). Screenshots go to
``$TMPDIR/aio-cluster-dashboard/<test>/``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

import pytest
import pytest_asyncio

from aio_cluster.control.model import Controls
from aio_cluster.control.store import ControlStore
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from conftest import MakeTopic, Produce
from dashboard_support import artifacts, chromium, consuming, dashboard_of, served
from support import create_topic, wait_until

async_api = pytest.importorskip("playwright.async_api", reason="Playwright is not installed")
if TYPE_CHECKING:
    from playwright.async_api import Page

pytestmark = pytest.mark.asyncio

SOON = 15_000
"""Milliseconds a change may take to show: a few refreshes of the dashboard's 0.5 s."""


@pytest_asyncio.fixture
async def browser_page() -> AsyncIterator[Page]:
    """A page of the machine's Chromium (skipped, saying why, where there is none). Every
    expectation on it may take `SOON`, not Playwright's 5 s: a page a form's post leads to waits
    for the dashboard's reads of ZooKeeper and Kafka, which a loaded machine stretched past 5 s
    (CI: the plan page after a pause button)."""
    executable = chromium()
    async_api.expect.set_options(timeout=SOON)
    async with async_api.async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=executable)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 1000})
            page.set_default_timeout(SOON)
            yield page
        finally:
            await browser.close()


async def test_the_page_follows_members_lag_and_owner_changes_live(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
    browser_page: Page,
) -> None:
    page, expect = browser_page, async_api.expect
    shots = artifacts("live")
    topic = await make_topic(partitions=6)
    await produce(topic, 60)
    async with (
        served(dashboard_of(cluster, group_name)) as url,
        consuming(cluster, group_name, topic) as first,
        consuming(cluster, group_name, topic) as second,
    ):
        await page.goto(url)
        row = page.locator(f'tr[data-group="{group_name}"]')
        await expect(row.locator("td").nth(1)).to_have_text("2", timeout=SOON)
        await page.screenshot(path=shots / "groups.png", full_page=True)
        await row.locator("a").click()
        await expect(page.locator("#live")).to_have_text("live", timeout=SOON)
        await expect(page.locator("tr[data-member]")).to_have_count(2, timeout=SOON)
        await expect(page.locator("#total-lag")).to_have_text("0", timeout=SOON)
        async with consuming(cluster, group_name, topic) as third:
            joined = page.locator(f'tr[data-member="{third.id}"]')
            await expect(joined).to_have_count(1, timeout=SOON)
            await expect(joined.locator("td.claimed")).not_to_have_text("0", timeout=SOON)
            await expect(page.locator("td.owner", has_text=third.id).first).to_be_visible()
            # Lag that the page sees rise and then fall to 0: the members hold their
            # partitions paused while records arrive, then read them.
            members = (first, second, third)
            for each in members:
                each.pause(*each.claimed)
            await produce(topic, 30, start=60)
            await expect(page.locator("#total-lag")).not_to_have_text("0", timeout=SOON)
            for each in members:
                each.resume(*each.claimed)
            await expect(page.locator("#total-lag")).to_have_text("0", timeout=SOON)
            await page.screenshot(path=shots / "three-members.png", full_page=True)
        moved = page.locator("ol.changes li", has_text=f"{third.id} →")
        await expect(moved.first).to_be_visible(timeout=SOON)
        await expect(page.locator(f'tr[data-member="{third.id}"]')).to_have_count(0)
        # Its partitions pass through "-" (no owner) between its release and the next claim:
        # the page must end with every partition owned by the two that stay.
        stayers = {first.id, second.id}

        async def owned_by_the_stayers() -> bool:
            return set(await page.locator("td.owner").all_inner_texts()) <= stayers

        await wait_until(owned_by_the_stayers, what="the two that stay own every partition")
        await page.screenshot(path=shots / "member-left.png", full_page=True)


async def test_an_unowned_partition_shows_that_verdict(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
    browser_page: Page,
) -> None:
    page, expect = browser_page, async_api.expect
    topic = await make_topic(partitions=1)
    await produce(topic, 5)
    layout = GroupLayout(group_name, topic)
    await zk.ensure_path(layout.offsets)
    await zk.create(layout.offset(0), b"0")
    async with served(dashboard_of(cluster, group_name)) as url:
        await page.goto(f"{url}/groups/{group_name}")
        await expect(page.locator(".headline .verdict")).to_have_text("error", timeout=SOON)
        reason = page.locator('ul.reasons li[data-status="unowned"]')
        await expect(reason).to_contain_text(f"{topic}/0: unowned")
        await expect(page.locator(f'tr[data-partition="{topic}/0"]')).to_contain_text("unowned")
        await page.screenshot(path=artifacts("unowned") / "unowned.png", full_page=True)


@contextlib.asynccontextmanager
async def stopped(
    stop: Callable[[], Awaitable[None]], start: Callable[[], Awaitable[None]]
) -> AsyncIterator[None]:
    """A server stopped for the block, started again after it (also when it fails)."""
    await stop()
    try:
        yield
    finally:
        await start()


async def a_stored_offset(cluster: LocalCluster) -> tuple[str, str]:
    """A fresh topic of one partition and a group with an offset stored for it and no member:
    what the page shows while a server is away. Returns the topic and the group."""
    topic = await create_topic(cluster.bootstrap, 1)
    group = f"dashboard-{topic}"
    zk = ZooKeeper(cluster.zookeeper)
    await zk.start()
    try:
        layout = GroupLayout(group, topic)
        await zk.ensure_path(layout.offsets)
        await zk.create(layout.offset(0), b"0")
    finally:
        await zk.close()
    return topic, group


@pytest.mark.faults  # it stops the servers of its own cluster, as test_faults.py does
async def test_the_page_says_zookeeper_is_down_and_recovers(
    restartable: LocalCluster, browser_page: Page
) -> None:
    page, expect = browser_page, async_api.expect
    cluster = restartable
    topic, group = await a_stored_offset(cluster)
    status = page.locator("#status")
    async with served(dashboard_of(cluster, group, timeout=2.0)) as url:
        await page.goto(f"{url}/groups/{group}")
        await expect(status).to_contain_text("ZooKeeper and Kafka answered", timeout=SOON)
        async with stopped(cluster.stop_zookeeper, cluster.start_zookeeper):
            await expect(status).to_contain_text("ZooKeeper cannot be reached", timeout=30_000)
            await expect(page.locator(f'tr[data-partition="{topic}/0"]')).to_be_visible()
            await page.screenshot(path=artifacts("zookeeper") / "down.png", full_page=True)
        await expect(status).to_contain_text("ZooKeeper and Kafka answered", timeout=60_000)
        await page.screenshot(path=artifacts("zookeeper") / "recovered.png", full_page=True)


@pytest.mark.faults  # it stops the servers of its own cluster, as test_faults.py does
async def test_the_page_says_kafka_is_down_and_recovers(
    restartable: LocalCluster, browser_page: Page
) -> None:
    """Kafka away: the banner names it with its reason, what was last seen stays on the page
    (the partition's row, its stored offset), and the page comes back by itself once Kafka is
    back."""
    page, expect = browser_page, async_api.expect
    cluster = restartable
    topic, group = await a_stored_offset(cluster)
    status = page.locator("#status")
    row = page.locator(f'tr[data-partition="{topic}/0"]')
    async with served(dashboard_of(cluster, group, timeout=2.0)) as url:
        await page.goto(f"{url}/groups/{group}")
        await expect(status).to_contain_text("ZooKeeper and Kafka answered", timeout=SOON)
        await expect(row).to_be_visible()
        async with stopped(cluster.stop_kafka, cluster.start_kafka):
            await expect(status).to_contain_text("Kafka cannot be reached", timeout=30_000)
            await expect(status).not_to_contain_text("ZooKeeper cannot be reached")
            await expect(row).to_be_visible()
            await page.screenshot(path=artifacts("kafka") / "down.png", full_page=True)
        await expect(status).to_contain_text("ZooKeeper and Kafka answered", timeout=60_000)
        await page.screenshot(path=artifacts("kafka") / "recovered.png", full_page=True)


TOKEN = "token-for-the-browser"


async def test_pause_and_resume_from_the_page_with_the_token(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
    browser_page: Page,
) -> None:
    """The token typed once in the control form; a row's pause button shows the plan, which
    the operator applies; the row shows the paused badge and the history the pause, live, and
    the partition's records wait while the other's are read; resume likewise, and its lag falls
    to 0. What ZooKeeper holds follows each step."""
    page, expect = browser_page, async_api.expect
    shots = artifacts("control")
    topic = await make_topic(partitions=2)
    await produce(topic, 10)
    store = ControlStore(zk, group_name)
    row = page.locator(f'tr[data-partition="{topic}/1"]')
    async with (
        served(dashboard_of(cluster, group_name, write_token=TOKEN)) as url,
        consuming(cluster, group_name, topic) as reader,
    ):
        await page.goto(f"{url}/groups/{group_name}")
        await expect(row.locator("td.owner")).to_have_text(reader.id, timeout=SOON)
        await expect(page.locator("#total-lag")).to_have_text("0", timeout=SOON)
        await page.locator('#control-form input[name="token"]').fill(TOKEN)
        await row.locator("button.act.pause").click()
        await expect(page.locator("h2")).to_contain_text(f"Plan: pause {topic}/1")
        await expect(page.locator("table.control-plan tr.owner td")).to_have_text(reader.id)
        await page.screenshot(path=shots / "plan.png", full_page=True)
        assert (await store.read()).paused == {}, "a plan writes nothing"
        await page.locator('input[name="token"]').fill(TOKEN)
        await page.get_by_role("button", name=f"pause {topic}/1").click()
        await expect(page.locator("main")).to_contain_text(f"paused {topic}/1 of group")
        assert (await store.read()).paused[(topic, 1)].by == "dashboard 127.0.0.1"
        await page.get_by_role("link", name="back").click()
        await expect(row.locator(".badge.paused")).to_be_visible(timeout=SOON)
        await expect(row.locator(".who")).to_contain_text("by dashboard 127.0.0.1 at")
        await expect(page.locator('ol.events li[data-action="pause"]')).to_contain_text(
            f"{topic}/1 by dashboard 127.0.0.1"
        )

        async def obeyed() -> bool:
            return 1 in (await reader.statistics()).operator_paused

        await wait_until(obeyed, what="the member holds partition 1 paused")
        # Records written now: partition 0's are read, partition 1's wait for the resume.
        sent = await produce(topic, 20, start=10)
        assert sent[0] > 0
        assert sent[1] > 0
        await expect(row.locator("td.lag")).to_have_text(str(sent[1]), timeout=SOON)
        await expect(page.locator("#total-lag")).to_have_text(str(sent[1]), timeout=SOON)
        await page.screenshot(path=shots / "paused.png", full_page=True)
        await page.locator('#control-form input[name="token"]').fill(TOKEN)
        await row.locator("button.act.resume").click()
        await expect(page.locator("h2")).to_contain_text(f"Plan: resume {topic}/1")
        await page.locator('input[name="token"]').fill(TOKEN)
        await page.get_by_role("button", name=f"resume {topic}/1").click()
        await expect(page.locator("main")).to_contain_text(f"resumed {topic}/1 of group")
        assert (await store.read()).paused == {}
        await page.get_by_role("link", name="back").click()
        await expect(page.locator('ol.events li[data-action="resume"]')).to_be_visible(timeout=SOON)
        await expect(row.locator(".badge.paused")).to_have_count(0)
        await expect(row.locator("button.act.pause")).to_be_visible()
        await expect(page.locator("#total-lag")).to_have_text("0", timeout=SOON)
        await page.screenshot(path=shots / "resumed.png", full_page=True)


async def test_without_the_token_there_are_no_buttons_and_a_post_is_refused(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
    browser_page: Page,
) -> None:
    """A read-only dashboard: no control form, no buttons, and a POST made from the page
    anyway is refused; a dashboard with writes refuses a wrong token. Nothing is written."""
    page, expect = browser_page, async_api.expect
    topic = await make_topic(partitions=1)
    await produce(topic, 3)
    row = page.locator(f'tr[data-partition="{topic}/0"]')
    form: dict[str, str | float | bool] = {"act": f"pause:{topic}:0", "token": TOKEN}
    async with consuming(cluster, group_name, topic):
        async with served(dashboard_of(cluster, group_name)) as url:
            await page.goto(f"{url}/groups/{group_name}")
            await expect(row.locator("td.owner")).not_to_have_text("-", timeout=SOON)
            await expect(page.locator("#control")).to_contain_text("Read-only")
            await expect(page.locator("#control-form")).to_have_count(0)
            await expect(page.locator("button.act")).to_have_count(0)
            refused = await page.request.post(f"{url}/groups/{group_name}/control", form=form)
            assert refused.status == 403
            assert "read-only" in await refused.text()
        async with served(dashboard_of(cluster, group_name, write_token=TOKEN)) as url:
            await page.goto(f"{url}/groups/{group_name}")
            await page.locator('#control-form input[name="token"]').fill("a guess")
            await row.locator("button.act.pause").click(timeout=SOON)
            await expect(page.locator("main")).to_contain_text("the token is not this dashboard's")
    assert await ControlStore(zk, group_name).read() == Controls()
