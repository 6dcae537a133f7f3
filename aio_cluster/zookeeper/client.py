"""The one module that speaks ZooKeeper: an asyncio facade over kazoo.

kazoo runs its connection on threads of its own; this module turns each of its asynchronous
results into an awaitable, delivers watches and session changes on the event loop, and bounds
every call with a timeout. The interface is kept narrow (awaitable calls, one-shot watches, a
session-state callback) so that an asyncio-native client can replace kazoo later without touching
the rest of the library. Why kazoo and not aiozk: aiozk replays a request on a new session after
the old one expired, and it can hang the event loop at shutdown (docs/concepts.md, "Why kazoo,
not aiozk"). What it needs of kazoo beyond kazoo's documented interface is in `seams.py`, checked
against the installed kazoo when a client is made.

Errors of kazoo are translated into `aio_cluster.errors` here, at the boundary (the table is
`failures.py`); the three that are the server's answer to one request (`NodeExistsError`,
`NoNodeError`, `BadVersionError`) are defined there too and importable from here, beside the
calls that raise them. The values the calls take and give (a node's `Stat`, the steps of a
`transaction`, the `SessionState`) are in `values.py`.

Security: the session can authenticate (``auth=[("digest", "user:password")]``), create its nodes
with an ACL that lets only that identity change them while anyone may read them
(``acl="creator"``), and speak TLS (``tls=``). A change the ACL does not grant raises
[AccessDeniedError][aio_cluster.AccessDeniedError] at once, not a retry. kazoo logs its requests at
DEBUG, the credentials included; the logger handed to it masks them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import anyio
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, RolledBackError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KeeperState
from kazoo.retry import KazooRetry

from ..errors import (
    AuthenticationError,
    BadVersionError,
    ConfigurationError,
    CoordinationError,
    CoordinationTimeout,
    NodeExistsError,
    NoNodeError,
)
from ..net.addresses import parse_servers
from ..net.tls import handshake_error, speaks_tls
from .failures import ANSWERS, translate
from .seams import note_handshakes
from .security import (
    Acl,
    ZooKeeperTLS,
    checked_auth,
    client_context,
    default_acl,
    kazoo_log,
    kazoo_tls_arguments,
    shared_acl,
)
from .threads import LoopHandler
from .values import Check, Create, Op, SessionState, SetData, Stat

__all__ = [
    "BadVersionError",
    "NoNodeError",
    "NodeExistsError",
    "WatchedNode",
    "ZooKeeper",
    "expire_session",
    "parse_hosts",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


class WatchedNode:
    """A node read with a watch (`ZooKeeper.watched()`): its data and stat as read, and
    `changed()`. A context manager: leaving it forgets the watch (one that has not fired yet
    fires later into nothing)."""

    def __init__(
        self, data: bytes, stat: Stat, changed: asyncio.Event, forget: Callable[[], None]
    ) -> None:
        self.data = data
        self.stat = stat
        self._changed = changed
        self._forget = forget

    async def changed(self) -> None:
        """Return once the node changed or went since it was read, or the session's state
        changed (a watch may be lost with its session: look again). The caller bounds it."""
        await self._changed.wait()

    def __enter__(self) -> WatchedNode:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._forget()


def parse_hosts(hosts: str | Sequence[str]) -> str:
    """Validate a ZooKeeper connect string and return it in kazoo's form.

    A chroot follows the last server only, as in ZooKeeper's own connect string:
    ``"h1:2181,h2:2181/app"``, or as a list ``["h1:2181", "h2:2181/app"]``. kazoo takes
    everything after the first ``/`` as the chroot, so a chroot on another server would silently
    turn the servers after it into part of the path; that form is refused instead.

    Args:
        hosts: ``"h1:2181,h2:2181/chroot"`` or a list of ``"host:port"`` (the last may carry the
            chroot).

    Raises:
        ConfigurationError: empty, a host without a numeric port in 1..65535, or a chroot after
            a server that is not the last (the message names that server).
    """
    text = hosts if isinstance(hosts, str) else ",".join(hosts)
    named = [server.strip() for server in text.split(",") if server.strip()]
    for server in named[:-1]:
        if "/" in server:
            raise ConfigurationError(
                f"ZooKeeper server {server!r} in {text!r} carries a chroot, but only the last "
                'server may: write it as "h1:2181,h2:2181/chroot"'
            )
    servers, _, chroot = text.partition("/")
    chroot = chroot.split(",", 1)[0].strip()  # only empty list items may follow it
    servers = ",".join(parse_servers(servers, "ZooKeeper"))
    return servers + ("/" + chroot if chroot else "")


def _stat(raw: Any) -> Stat:
    return Stat(version=raw.version, czxid=raw.czxid, ephemeral_owner=raw.ephemeralOwner)


class ZooKeeper:
    """An asyncio client of one ZooKeeper session (and its successors after expiry).

    Every call takes at most ``request_timeout`` seconds and raises a
    [CoordinationError][aio_cluster.CoordinationError] on failure. Watches and state changes are
    delivered as plain callbacks on the event loop that called `start()`; they must not block.
    Requests pending when kazoo notices an expiry fail; one made while it reconnects afterwards
    is sent on the next session (see `aio_cluster.member.protocol.claiming`).
    """

    def __init__(
        self,
        hosts: str | Sequence[str],
        *,
        session_timeout: float = 10.0,
        request_timeout: float = 10.0,
        auth: Sequence[tuple[str, str]] = (),
        acl: Acl = "open",
        tls: ZooKeeperTLS | bool = False,
    ) -> None:
        """Configure the client; nothing connects before `start()`.

        Args:
            hosts: the connect string, e.g. ``"127.0.0.1:2181"`` or ``["h1:2181", "h2:2181"]``.
            session_timeout: seconds the server keeps the session alive without hearing from us.
            request_timeout: the bound on every single call.
            auth: credentials the session authenticates with, ``[("digest", "user:password")]``.
            acl: ``"open"``: nodes anyone may change (the server's default); ``"creator"``: nodes
                only the identities of ``auth`` may change or delete, and anyone may read.
            tls: speak TLS: True trusts the system's certificate authorities, a
                [ZooKeeperTLS][aio_cluster.ZooKeeperTLS] says what to trust and which client
                certificate to show.

        Raises:
            ConfigurationError: a malformed connect string, a non-positive timeout, a credential
                that is not ``("digest", "user:password")``, an unknown ``acl``, ``"creator"``
                without credentials, or a host name check without verified certificates.
        """
        if session_timeout <= 0 or request_timeout <= 0:
            raise ConfigurationError("session_timeout and request_timeout must be positive")
        self._hosts = parse_hosts(hosts)
        self._session_timeout = session_timeout
        self._request_timeout = request_timeout
        auth_data = checked_auth(auth)
        self._tls = secure = ZooKeeperTLS() if tls is True else tls or None
        tls_args = {} if secure is None else kazoo_tls_arguments(secure)
        acls = default_acl(acl, auth_data)
        self._shared_acl = None if acls is None else shared_acl()
        self._client = KazooClient(
            hosts=self._hosts,
            timeout=session_timeout,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
            command_retry=None,
            auth_data=auth_data or None,
            default_acl=acls,
            logger=kazoo_log,
            handler=LoopHandler(),
            **tls_args,
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        self._state = SessionState.CLOSED
        self._state_callbacks: list[Callable[[SessionState], None]] = []
        self._watch_wrappers: dict[Callable[[], None], Callable[[Any], None]] = {}
        self._client.add_listener(self._on_kazoo_state)
        self._negotiated = session_timeout
        self._heard_at = time.monotonic()
        note_handshakes(self._client, self._noted_handshake)

    def _noted_handshake(self, sent: float, granted: float) -> None:
        """A (re)connection's handshake began at ``sent`` and the server granted ``granted``
        seconds: it heard from the session then (kazoo keeps neither; `seams`)."""
        self._negotiated = granted
        self._heard_at = max(self._heard_at, sent)

    @property
    def hosts(self) -> str:
        """The connect string in use."""
        return self._hosts

    @property
    def session_timeout(self) -> float:
        """Seconds the server keeps the session alive without hearing from this client, as
        asked for."""
        return self._session_timeout

    @property
    def negotiated_timeout(self) -> float:
        """Seconds the server keeps this session alive without hearing from it, as the server
        granted at the last connection (it bounds the asked-for timeout by its own
        ``minSessionTimeout`` and ``maxSessionTimeout``); the asked-for one before that, and
        where the installed kazoo does not let the handshake be noted (`seams`)."""
        return self._negotiated

    @property
    def heard_at(self) -> float:
        """When (``time.monotonic()``) the last request the server answered was sent: the
        server heard from the session then or later, so it cannot expire it before
        ``heard_at + negotiated_timeout``."""
        return self._heard_at

    async def ping(self) -> None:
        """A request that costs the server next to nothing, to learn that it still hears from
        the session (see `heard_at`); it stands in for kazoo's own heartbeat, which kazoo sends
        only when no request went out for a third of the timeout."""
        await self.exists("/")

    @property
    def state(self) -> SessionState:
        """The session state as last reported (CLOSED before start and after close)."""
        return self._state

    @property
    def session_id(self) -> int | None:
        """The current session's id, or None when there is none."""
        client_id = self._client.client_id
        return None if client_id is None else int(client_id[0])

    @property
    def session_password(self) -> bytes | None:
        """The current session's password (with the id it identifies the session to the server)."""
        client_id = self._client.client_id
        return None if client_id is None else bytes(client_id[1])

    def on_state_change(self, callback: Callable[[SessionState], None]) -> Callable[[], None]:
        """Call ``callback(state)`` on the event loop at every session state change.

        Returns:
            A function that removes the callback again.
        """
        self._state_callbacks.append(callback)
        return lambda: self._state_callbacks.remove(callback)

    async def start(self, timeout: float | None = None) -> None:
        """Connect and open a session.

        Raises:
            AuthenticationError: the server refused the credentials or the TLS handshake, or it
                speaks TLS and this client does not (found once the bound has passed).
            CoordinationTimeout: no server answered within ``timeout`` (default: request_timeout).
        """
        self._loop = asyncio.get_running_loop()
        bound = self._request_timeout if timeout is None else timeout
        try:
            await asyncio.to_thread(self._client.start, bound)
        except KazooTimeoutError as exc:
            refused = self._client.client_state == KeeperState.AUTH_FAILED
            await asyncio.to_thread(self._client.stop)
            if refused:
                raise AuthenticationError(
                    f"ZooKeeper {self._hosts} refused the session's credentials"
                ) from exc
            handshake = await self._diagnose_tls()
            if handshake is not None:
                raise handshake from exc
            raise CoordinationTimeout(
                f"no ZooKeeper server of {self._hosts!r} answered within {bound:g} s"
            ) from exc
        self._state = SessionState.CONNECTED

    async def _diagnose_tls(self) -> AuthenticationError | None:
        """Why no server answered, if TLS is the reason: a refused handshake, or a plaintext
        client at a TLS port."""
        for server in parse_servers(self._hosts.partition("/")[0], "ZooKeeper"):
            host, _, port = server.rpartition(":")
            if self._tls is None:
                if await speaks_tls(host, int(port), self._request_timeout):
                    return AuthenticationError(
                        f"ZooKeeper {server} expects TLS: pass zookeeper_tls to speak it"
                    )
                continue
            try:
                error = await handshake_error(
                    host, int(port), client_context(self._tls), self._request_timeout
                )
            except (OSError, asyncio.TimeoutError):
                continue
            if error is not None:
                return AuthenticationError(
                    f"the TLS handshake with ZooKeeper {server} failed "
                    f"({error.reason or type(error).__name__}): its certificate is not trusted, "
                    f"or {server} does not speak TLS"
                )
        return None

    async def close(self) -> None:
        """Close the session (its ephemeral nodes go at once) and stop kazoo's threads."""
        if self._loop is None or self._closing:
            return
        self._closing = True
        self._state = SessionState.CLOSED
        await asyncio.to_thread(self._stop_and_close)

    def _stop_and_close(self) -> None:
        self._client.stop()
        self._client.close()

    def _on_kazoo_state(self, state: str) -> None:
        # Runs on a kazoo thread: never block here, hand over to the loop.
        mapped = {
            KazooState.CONNECTED: SessionState.CONNECTED,
            KazooState.SUSPENDED: SessionState.SUSPENDED,
            KazooState.LOST: SessionState.LOST,
        }[state]
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._deliver_state, mapped)

    def _deliver_state(self, state: SessionState) -> None:
        if self._state is SessionState.CLOSED:
            return
        self._state = state
        log.debug("ZooKeeper session %s: %s", self._hosts, state.value)
        for callback in list(self._state_callbacks):
            callback(state)

    def _watcher(self, callback: Callable[[], None]) -> Callable[[Any], None]:
        """A kazoo watch function that runs ``callback`` on the loop; one per callback, so that
        kazoo (which keeps watchers in a set) registers a repeated watch only once."""
        wrapper = self._watch_wrappers.get(callback)
        if wrapper is None:
            loop = self._loop
            assert loop is not None, "start() first"

            def wrapper(_event: Any) -> None:
                if not loop.is_closed():
                    loop.call_soon_threadsafe(callback)

            self._watch_wrappers[callback] = wrapper
        return wrapper

    async def _call(self, what: str, start: Callable[[], Any]) -> Any:
        """Run one kazoo ``*_async`` call and await its result within the request timeout."""
        loop = self._loop
        if loop is None or self._state is SessionState.CLOSED:
            raise CoordinationError(f"{what}: the ZooKeeper client is not started")
        future: asyncio.Future[Any] = loop.create_future()
        sent = time.monotonic()

        def settle(result: Any) -> None:
            if result.successful() or isinstance(result.exception, ANSWERS):
                self._heard_at = max(self._heard_at, sent)
            if future.done():
                return
            try:
                future.set_result(result.get_nowait())
            except BaseException as exc:
                future.set_exception(exc)

        def done(result: Any) -> None:
            if not loop.is_closed():
                loop.call_soon_threadsafe(settle, result)

        try:
            start().rawlink(done)
        except KazooException as exc:
            raise translate(exc, what) from exc
        try:
            with anyio.fail_after(self._request_timeout):
                return await future
        except TimeoutError as exc:
            raise CoordinationTimeout(
                f"{what}: no answer within {self._request_timeout:g} s"
            ) from exc
        except Exception as exc:
            mapped = translate(exc, what)
            if mapped is exc:
                raise
            raise mapped from exc

    async def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, makepath: bool = False
    ) -> str:
        """Create a node.

        Raises:
            NodeExistsError: it exists already.
            NoNodeError: its parent is missing and ``makepath`` is false.
        """
        result = await self._call(
            f"create {path}",
            lambda: self._client.create_async(path, data, ephemeral=ephemeral, makepath=makepath),
        )
        return str(result)

    async def ensure_path(self, path: str, *, shared: bool = False) -> None:
        """Create a persistent node and its missing parents; nothing if it exists.

        Args:
            path: the node.
            shared: the node is a common parent, under which other identities create nodes of
                their own (``/consumers``): with the ``"creator"`` ACL anyone may then also
                create children in it, but only its creator may delete them.
        """
        acl = self._shared_acl if shared else None
        await self._call(f"ensure {path}", lambda: self._client.ensure_path_async(path, acl=acl))

    async def get(
        self, path: str, *, watch: Callable[[], None] | None = None
    ) -> tuple[bytes, Stat]:
        """Read a node's data and stat; ``watch`` runs once when it changes or goes.

        Raises:
            NoNodeError: there is no such node.
        """
        kazoo_watch = None if watch is None else self._watcher(watch)
        data, stat = await self._call(
            f"get {path}", lambda: self._client.get_async(path, watch=kazoo_watch)
        )
        return bytes(data or b""), _stat(stat)

    async def exists(self, path: str, *, watch: Callable[[], None] | None = None) -> Stat | None:
        """The node's stat or None; ``watch`` runs once when it is created, changed or deleted."""
        kazoo_watch = None if watch is None else self._watcher(watch)
        stat = await self._call(
            f"exists {path}", lambda: self._client.exists_async(path, watch=kazoo_watch)
        )
        return None if stat is None else _stat(stat)

    async def sync(self, path: str = "/") -> None:
        """Wait until the server this session talks to has applied every write the ensemble
        committed before the call. A server answers reads from its own copy, which may lag the
        leader's: a client that learns of another client's write other than through ZooKeeper
        (the other said so, or closed) sees it surely only in a read after a sync."""
        await self._call(f"sync {path}", lambda: self._client.sync_async(path))

    async def get_children(
        self, path: str, *, watch: Callable[[], None] | None = None
    ) -> list[str]:
        """The names of a node's children; ``watch`` runs once when they change.

        Raises:
            NoNodeError: there is no such node.
        """
        kazoo_watch = None if watch is None else self._watcher(watch)
        children = await self._call(
            f"children {path}", lambda: self._client.get_children_async(path, watch=kazoo_watch)
        )
        return [str(child) for child in children]

    async def get_children_version(
        self, path: str, *, watch: Callable[[], None] | None = None
    ) -> tuple[list[str], int]:
        """The names of a node's children and its child version (``cversion``: it counts every
        creation and deletion of a child, so it shows a child deleted and made again);
        ``watch`` runs once when the children change.

        Raises:
            NoNodeError: there is no such node.
        """
        kazoo_watch = None if watch is None else self._watcher(watch)
        children, stat = await self._call(
            f"children {path}",
            lambda: self._client.get_children_async(path, watch=kazoo_watch, include_data=True),
        )
        return [str(child) for child in children], int(stat.cversion)

    async def set(self, path: str, data: bytes, *, version: int = -1) -> Stat:
        """Overwrite a node's data, at ``version`` unless it is -1.

        Raises:
            NoNodeError: there is no such node.
            BadVersionError: the node is at another version.
        """
        stat = await self._call(
            f"set {path}", lambda: self._client.set_async(path, data, version=version)
        )
        return _stat(stat)

    async def delete(self, path: str, *, version: int = -1) -> None:
        """Delete a node, at ``version`` unless it is -1.

        Raises:
            NoNodeError: there is no such node.
            BadVersionError: the node is at another version.
        """
        await self._call(f"delete {path}", lambda: self._client.delete_async(path, version=version))

    async def watched(self, path: str) -> WatchedNode:
        """Read a node and watch it, in one request: its data and stat, and a wait for its
        next change (see `WatchedNode`).

        Raises:
            NoNodeError: there is no such node.
        """
        changed = asyncio.Event()
        unsubscribe = self.on_state_change(lambda _state: changed.set())

        def forget() -> None:
            unsubscribe()
            self._watch_wrappers.pop(changed.set, None)

        try:
            data, stat = await self.get(path, watch=changed.set)
        except BaseException:
            forget()
            raise
        return WatchedNode(data, stat, changed, forget)

    async def transaction(self, ops: Sequence[Op]) -> list[Stat | None]:
        """Apply ``ops`` atomically: all of them or none.

        Returns:
            One entry per step: the node's new stat for a `SetData`, None for the others.

        Raises:
            CoordinationError: one step failed (the message names it); nothing was applied.
        """
        if not ops:
            return []

        def begin() -> Any:
            tx = self._client.transaction()
            for op in ops:
                if isinstance(op, Check):
                    tx.check(op.path, op.version)
                elif isinstance(op, Create):
                    tx.create(op.path, op.data, ephemeral=op.ephemeral, sequence=op.sequence)
                elif isinstance(op, SetData):
                    tx.set_data(op.path, op.data, version=op.version)
                else:
                    tx.delete(op.path, version=op.version)
            return tx.commit_async()

        results = await self._call(f"transaction of {len(ops)}", begin)
        for op, result in zip(ops, results, strict=True):
            if isinstance(result, Exception) and not isinstance(result, RolledBackError):
                mapped = translate(result, f"transaction step {op}")
                raise mapped from result
        return [
            _stat(result) if isinstance(op, SetData) else None
            for op, result in zip(ops, results, strict=True)
        ]


async def expire_session(
    connect: str, session_id: int, password: bytes, *, timeout: float = 10.0
) -> None:
    """Force the server to expire a session, as a fault for tests.

    A second client joins the session with its id and password and closes it, which ends the
    session on the server; the original client learns of it as LOST when it next talks to the
    server. The server lets one connection hold a session, and the original client reconnects
    as soon as the join takes its connection away: when it takes the session back before the
    close was sent, the close never reaches the server. So the join is repeated until one finds
    the session gone (the server then gives the joining client a session of its own).
    """

    def join_and_close_until_gone() -> None:
        deadline = time.monotonic() + timeout * 2
        while (left := deadline - time.monotonic()) > 0:
            other = KazooClient(hosts=connect, client_id=(session_id, password), timeout=timeout)
            try:
                other.start(left)  # on a timeout it stops and closes the client itself
            except KazooTimeoutError:
                continue
            # None when the original took the session back already: no close was sent.
            joined = other.client_id
            try:
                other.stop()  # sends the close where the connection still holds the session
            except KazooException:
                pass  # its connection did not end in time; the next join tells what happened
            finally:
                other.close()
            if joined is not None and joined[0] != session_id:
                return  # a session of its own: the one to expire is gone
        raise KazooTimeoutError("the session outlived every join")

    try:
        await asyncio.to_thread(join_and_close_until_gone)
    except KazooTimeoutError as exc:
        raise CoordinationTimeout(f"could not join session {session_id:#x} to expire it") from exc
