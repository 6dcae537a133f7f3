"""kazoo's thread handler as the ZooKeeper adapter runs it: waits by ``poll`` that answer as
``select`` does, and results and watch events whose callbacks run on the thread that has them
(pure: local sockets and threads, no server; the adapter's calls are tested against the real one
in ``test_zk.py``)."""

from __future__ import annotations

import logging
import select
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.protocol.states import Callback

from aio_cluster.zookeeper.threads import LoopHandler, poll_select

pytestmark = pytest.mark.skipif(not hasattr(select, "poll"), reason="no poll here")


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair()
    yield ours, theirs
    ours.close()
    theirs.close()


def test_a_wait_tells_which_sockets_are_ready_and_which_way(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    assert poll_select([ours], [], 0.01) == ([], [], [])
    assert poll_select([ours], [ours], 1.0) == ([], [ours], [])
    theirs.send(b"x")
    assert poll_select([ours, theirs], [], 1.0) == ([ours], [], [])
    assert poll_select([ours.fileno()], [], 1.0) == ([ours.fileno()], [], [])


def test_a_socket_whose_peer_is_gone_is_ready_to_tell_so(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    theirs.close()
    assert poll_select([ours], [], 1.0)[0] == [ours]
    assert ours.recv(1) == b""


def test_results_call_back_on_the_thread_that_sets_them(caplog: pytest.LogCaptureFixture) -> None:
    handler = LoopHandler()
    handler.start()
    try:
        result = handler.async_result()
        heard: list[tuple[str, Any]] = []

        def failing(_result: Any) -> None:
            raise RuntimeError("a callback's bug")

        result.rawlink(failing)
        result.rawlink(lambda done: heard.append((threading.current_thread().name, done.get())))
        setter = threading.Thread(target=result.set, args=(42,), name="connection")
        with caplog.at_level(logging.ERROR, logger="aio_cluster.zookeeper.seams"):
            setter.start()
            setter.join()
        # Heard by the time set() returned, on the setting thread, despite the callback before.
        assert heard == [("connection", 42)]
        assert "callback failed" in caplog.text
    finally:
        handler.stop()


def test_watch_events_call_back_on_the_thread_that_has_them() -> None:
    handler = LoopHandler()
    handler.start()
    try:
        heard: list[tuple[str, str]] = []

        def watch(what: str) -> None:
            heard.append((threading.current_thread().name, what))

        event = Callback("watch", watch, ("changed",))
        dispatcher = threading.Thread(
            target=handler.dispatch_callback, args=(event,), name="connection"
        )
        dispatcher.start()
        dispatcher.join()
        assert heard == [("connection", "changed")]
    finally:
        handler.stop()
