"""kazoo's seams (`aio_cluster.zookeeper.seams`): each fits the installed kazoo and keeps its
benefit; a kazoo whose private names moved (simulated here, one seam at a time) is warned about
once, with its version, and a real client against the real server works on by kazoo's public path.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import uuid
from collections import namedtuple
from typing import Any

import pytest
from kazoo.handlers import utils as kazoo_utils
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.protocol import states
from kazoo.protocol.connection import ConnectionHandler

from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper import seams
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.threads import LoopHandler
from aio_cluster.zookeeper.values import SessionState

ASKED = 120.0
"""A session timeout above the test servers' longest (60 s): what the server grants differs."""


@pytest.fixture(autouse=True)
def unwarned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts in a process that has warned of no seam yet."""
    monkeypatch.setattr(seams, "_warned", set())


def seam_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == seams.__name__ and record.levelno == logging.WARNING
    ]


async def a_session_works(connect: str) -> ZooKeeper:
    """A started client that created, read and watched a node and saw the watch fire; two
    clients are made, so that a second check of the seams is seen too."""
    ZooKeeper(connect)  # checked, never started
    zk = ZooKeeper(connect, session_timeout=ASKED)
    await zk.start()
    assert zk.state is SessionState.CONNECTED
    assert zk.session_id is not None
    path = f"/aio-cluster-test/seams-{uuid.uuid4().hex}"
    await zk.create(path, b"one", makepath=True)
    with await zk.watched(path) as node:
        assert node.data == b"one"
        await zk.set(path, b"two")
        await asyncio.wait_for(node.changed(), 10.0)
    assert (await zk.get(path))[0] == b"two"
    return zk


def results_call_back_on(handler: LoopHandler) -> str:
    """The thread a result's callback ran on, the result set by a thread named "connection"."""
    handler.start()
    try:
        result = handler.async_result()
        heard: list[str] = []
        ran = threading.Event()

        def callback(_result: Any) -> None:
            heard.append(threading.current_thread().name)
            ran.set()

        result.rawlink(callback)
        setter = threading.Thread(target=result.set, args=(1,), name="connection")
        setter.start()
        setter.join()
        assert ran.wait(10.0)
        return heard[0]
    finally:
        handler.stop()


@pytest.mark.seams
@pytest.mark.asyncio
async def test_every_seam_fits_the_installed_kazoo(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    zk = await a_session_works(cluster.zookeeper)
    try:
        assert zk.negotiated_timeout < ASKED, "the granted timeout was noted at the handshake"
    finally:
        await zk.close()
    assert results_call_back_on(LoopHandler()) == "connection"
    assert seams.direct_watches_fit()
    assert seam_warnings(caplog) == []


@pytest.mark.seams
@pytest.mark.asyncio
async def test_a_changed_handshake_leaves_the_asked_timeout(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = ConnectionHandler._connect

    def _connect(self: Any, host: str, address: str, port: int) -> Any:  # a parameter renamed
        return original(self, host, address, port)

    monkeypatch.setattr(ConnectionHandler, "_connect", _connect)
    zk = await a_session_works(cluster.zookeeper)
    try:
        assert zk.negotiated_timeout == ASKED
    finally:
        await zk.close()
    (warning,) = seam_warnings(caplog)
    assert "KazooClient._connection._connect" in warning
    assert f"kazoo {seams.kazoo_version()}" in warning


def test_a_client_without_the_handshake_is_warned_of(caplog: pytest.LogCaptureFixture) -> None:
    noted: list[float] = []
    assert not seams.note_handshakes(object(), lambda _sent, granted: noted.append(granted))
    assert not seams.note_handshakes(object(), lambda _sent, granted: noted.append(granted))
    (warning,) = seam_warnings(caplog)
    assert "no such method" in warning
    assert noted == []


@pytest.fixture
def results_dispatched_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kazoo whose results no longer dispatch through the ``_do_callbacks`` a subclass
    overrides (as after a rename): each result calls kazoo's own dispatch."""
    kazoo_init = kazoo_utils.AsyncResult.__init__
    kazoo_dispatch = kazoo_utils.AsyncResult._do_callbacks

    def __init__(self: Any, *args: Any) -> None:
        kazoo_init(self, *args)
        self._do_callbacks = functools.partial(kazoo_dispatch, self)

    monkeypatch.setattr(kazoo_utils.AsyncResult, "__init__", __init__)


@pytest.mark.seams
@pytest.mark.asyncio
@pytest.mark.usefixtures("results_dispatched_elsewhere")
async def test_moved_result_dispatch_leaves_kazoos_completion_thread(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    zk = await a_session_works(cluster.zookeeper)
    await zk.close()
    assert results_call_back_on(LoopHandler()) != "connection", "kazoo's thread ran it"
    (warning,) = seam_warnings(caplog)
    assert "AsyncResult._do_callbacks" in warning
    assert f"kazoo {seams.kazoo_version()}" in warning


@pytest.fixture
def watch_events_renamed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kazoo whose watch events name their fields otherwise, its own handler reading them."""

    class Callback(namedtuple("Callback", ("type", "function", "arguments"))):
        pass

    def dispatch_callback(self: Any, callback: Any) -> None:
        self.callback_queue.put(lambda: callback.function(*callback.arguments))

    for module in ("kazoo.protocol.states", "kazoo.protocol.connection", "kazoo.client"):
        monkeypatch.setattr(f"{module}.Callback", Callback)
    monkeypatch.setattr(SequentialThreadingHandler, "dispatch_callback", dispatch_callback)


@pytest.mark.seams
@pytest.mark.asyncio
@pytest.mark.usefixtures("watch_events_renamed")
async def test_renamed_watch_events_go_through_kazoos_callback_thread(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    assert states.Callback._fields == ("type", "function", "arguments")
    zk = await a_session_works(cluster.zookeeper)
    await zk.close()
    (warning,) = seam_warnings(caplog)
    assert "Callback.func and Callback.args" in warning
    assert f"kazoo {seams.kazoo_version()}" in warning


@pytest.mark.seams
@pytest.mark.asyncio
async def test_a_client_closed_with_requests_in_flight_ends_its_session(
    cluster: LocalCluster, zk: ZooKeeper
) -> None:
    """Why kazoo 2.11 is the floor: kazoo 2.10.0 stops its connection loop as soon as it is told
    to stop, and with requests still queued it never sends the session's Close: a member's
    claims and registration would stay for the session timeout (kazoo's #688, reverted in 2.11)."""
    for _ in range(3):
        path = f"/aio-cluster-test/seams-{uuid.uuid4().hex}"
        owner = ZooKeeper(cluster.zookeeper, session_timeout=ASKED)
        await owner.start()
        await owner.create(path, b"", ephemeral=True, makepath=True)
        in_flight = [asyncio.ensure_future(owner.exists("/")) for _ in range(20)]
        await asyncio.sleep(0)  # the requests are sent to kazoo
        await owner.close()
        await asyncio.gather(*in_flight, return_exceptions=True)
        await zk.sync(path)
        assert await zk.exists(path) is None, "the closed session's node is gone"
