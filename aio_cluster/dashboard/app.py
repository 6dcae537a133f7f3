"""`Dashboard`: the live web dashboard of the groups, an ASGI application (Starlette) served by
``aio-cluster dashboard`` or mounted in an application of the user's.

Routes (relative to where it is mounted)::

    GET  /                              the groups
    GET  /events                        their fragments, as server-sent events
    GET  /groups/{group}                a group: members, lag over time, partitions, timeline
    GET  /groups/{group}/events         its fragments, as server-sent events (same query)
    POST /groups/{group}/reset          plan a reset (writes allowed, and the token)
    POST /groups/{group}/reset/{plan}   store the plan shown (writes allowed, and the token)
    POST /groups/{group}/control        plan a partition's pause, resume or skip (likewise)
    POST /groups/{group}/control/{plan} apply the plan shown (likewise)
    GET  /static/...                    the script and the style sheet, from the package

The handlers here are thin: the reads are `aio_cluster.dashboard.watch`'s, what is shown is
computed in `aio_cluster.dashboard.views` and drawn in `aio_cluster.dashboard.pages`.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from urllib.parse import parse_qsl

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..config import ZooKeeperSecurity
from ..errors import AioClusterError, ConfigurationError
from ..kafka.options import KafkaOptions
from ..operator.connection import Connection
from ..operator.health import Thresholds
from . import pages
from .controls import ControlPlans, parse_request
from .resets import Resets, reset_target
from .views import Filters
from .watch import Watcher

__all__ = ["Dashboard"]

log = logging.getLogger(__name__)

STATIC = Path(__file__).with_name("static")


class Dashboard:
    """A live web dashboard of aio_cluster consumer groups, read from ZooKeeper and Kafka.

    ``dashboard.app`` is the ASGI application. Run it on its own (its lifespan runs the
    dashboard: ``uvicorn.run(Dashboard(...).app)``), or mount it in a Starlette or FastAPI
    application and enter the dashboard in that application's lifespan, since a mounted
    application's own lifespan is not run::

        dashboard = Dashboard("127.0.0.1:9092", "127.0.0.1:2181")

        @contextlib.asynccontextmanager
        async def lifespan(app):
            async with dashboard:
                yield

        app = FastAPI(lifespan=lifespan)
        app.mount("/groups-dashboard", dashboard.app)

    While entered, it looks at the groups every ``interval`` seconds in a task of its own task
    group; leaving stops it and closes its ZooKeeper and Kafka clients. It is read-only unless
    a ``write_token`` is given: then a reset of offsets, and a partition's pause, resume or skip,
    can be planned and made from the page by whoever gives that token (keep it secret: it is
    never shown or logged). Every write made from the page is logged (``aio_cluster.dashboard``
    logger, level WARNING) saying what it did and from which address; pauses, resumes and skips
    also go to the group's control history, which the page shows.
    """

    def __init__(
        self,
        bootstrap: str,
        zookeepers: str,
        *,
        groups: Sequence[str] = (),
        interval: float = 2.0,
        keep: float = 3600.0,
        window: float = 30.0,
        lag_threshold: int = 0,
        max_lag: int | None = None,
        timeout: float = 10.0,
        kafka_options: KafkaOptions | None = None,
        zookeeper_security: ZooKeeperSecurity | None = None,
        write_token: str | None = None,
    ) -> None:
        """Configure the dashboard; nothing connects before it is entered.

        Args:
            bootstrap: the Kafka servers, ``"host:port,host:port"``.
            zookeepers: the ZooKeeper servers (with a chroot after the last, if any).
            groups: the groups to show; empty: every group under ``/consumers``.
            interval: seconds between two looks at the groups.
            keep: seconds of lag history and ownership timeline kept (the longest chart).
            window: seconds of looks each partition's verdict is judged on, with the rules of
                ``aio-cluster check`` (its ``--window``).
            lag_threshold: ``check``'s ``--lag-threshold``: a lag at or below it is caught up.
            max_lag: ``check``'s ``--max-lag``: a lag above it is lagging however it moved.
            timeout: seconds to wait for a server at each request.
            kafka_options: how to reach Kafka (TLS, SASL).
            zookeeper_security: how to reach ZooKeeper (credentials, ACL, TLS).
            write_token: allows resets of offsets, pauses, resumes and skips from the page to
                whoever gives it; None: read-only.

        Raises:
            ConfigurationError: a non-positive time, or an empty ``write_token``.
        """
        if min(interval, keep, window, timeout) <= 0:
            raise ConfigurationError("interval, keep, window and timeout must be positive")
        if write_token is not None and not write_token:
            raise ConfigurationError("write_token must not be empty; None makes it read-only")
        connection = Connection(
            bootstrap=bootstrap,
            zookeeper=zookeepers,
            timeout=timeout,
            kafka=kafka_options or KafkaOptions(),
            security=zookeeper_security or ZooKeeperSecurity(),
        )
        self.watcher = Watcher(
            connection,
            groups,
            interval=interval,
            keep=keep,
            window=window,
            thresholds=Thresholds(lag_threshold, max_lag),
        )
        self._token = write_token
        self._resets = Resets()
        self._controls = ControlPlans()
        self._running = False
        self._stopped = anyio.Event()
        self._tasks: contextlib.AsyncExitStack | None = None
        self.app = Starlette(
            routes=[
                Route("/", self._groups),
                Route("/events", self._groups_events),
                Route("/groups/{group}", self._group),
                Route("/groups/{group}/events", self._group_events),
                Route("/groups/{group}/reset", self._plan, methods=["POST"]),
                Route("/groups/{group}/reset/{plan}", self._store, methods=["POST"]),
                Route("/groups/{group}/control", self._plan_control, methods=["POST"]),
                Route("/groups/{group}/control/{plan}", self._apply_control, methods=["POST"]),
                Mount("/static", StaticFiles(directory=STATIC), name="static"),
            ],
            lifespan=self._lifespan,
        )

    @property
    def writes(self) -> bool:
        """Whether writes (resets, pauses, resumes, skips) may be made from the page (with the
        token)."""
        return self._token is not None

    async def __aenter__(self) -> Dashboard:
        """Start looking at the groups (in a task group of the dashboard's own)."""
        if self._running:
            raise ConfigurationError("the dashboard runs already")
        stack = contextlib.AsyncExitStack()
        tasks = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(tasks.cancel_scope.cancel)  # runs first: the loop ends, then the group
        tasks.start_soon(self.watcher.run)
        self._tasks, self._running, self._stopped = stack, True, anyio.Event()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Stop looking; the event streams end; the clients are closed."""
        self._running = False
        self._stopped.set()
        stack, self._tasks = self._tasks, None
        if stack is not None:
            await stack.aclose()

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        async with self:
            yield

    # --- pages ---------------------------------------------------------------------------------

    def _root(self, request: Request) -> str:
        return str(request.scope.get("root_path", "")).rstrip("/")

    def _status(self) -> str:
        watcher = self.watcher
        return pages.status([watcher.zookeeper, watcher.kafka], watcher.refreshed_at, self._running)

    async def _groups(self, request: Request) -> Response:
        root = self._root(request)
        fragments = pages.groups_fragments(self.watcher.histories, root, self._status())
        body = "".join(f'<section id="{key}">{html}</section>' for key, html in fragments.items())
        return HTMLResponse(pages.page("Groups", root, body, f"{root}/events"))

    async def _groups_events(self, request: Request) -> Response:
        root = self._root(request)
        return self._stream(
            lambda: pages.groups_fragments(self.watcher.histories, root, self._status())
        )

    def _group_view(self, request: Request) -> tuple[Filters, str]:
        query = dict(request.query_params)
        window = query.get("window", "5m")
        return Filters.parse(query), window if window in pages.CHART_WINDOWS else "5m"

    def _fragments(self, group: str, filters: Filters, window: str) -> dict[str, str]:
        history = self.watcher.histories.get(group)
        if history is None:
            return {"status": self._status()}
        return pages.group_fragments(
            history, filters, window, time.time(), self._status(), self.writes
        )

    async def _group(self, request: Request) -> Response:
        root, group = self._root(request), request.path_params["group"]
        history = self.watcher.histories.get(group)
        if history is None:
            body = pages.message_page(
                f"no group {group!r} is shown here (yet): it is not in ZooKeeper, or not among "
                "the groups this dashboard was started for",
                f"{root}/",
                error=True,
            )
            return HTMLResponse(pages.page(group, root, body, None), status_code=404)
        filters, window = self._group_view(request)
        fragments = self._fragments(group, filters, window)
        forms = {
            "control": pages.control_form(group, root, self.writes),
            "reset": pages.reset_form(group, history.topics(), root, self.writes),
        }
        body = pages.group_body(history, filters, window, fragments, forms)
        query = f"?{request.url.query}" if request.url.query else ""
        return HTMLResponse(pages.page(group, root, body, f"{root}/groups/{group}/events{query}"))

    async def _group_events(self, request: Request) -> Response:
        group = request.path_params["group"]
        filters, window = self._group_view(request)
        return self._stream(lambda: self._fragments(group, filters, window))

    def _stream(self, fragments: Callable[[], Mapping[str, str]]) -> Response:
        """Server-sent events: the fragments now, and again after every refresh, until the
        client goes or the dashboard stops."""

        async def events() -> AsyncIterator[str]:
            while True:
                yield f"event: update\ndata: {json.dumps(fragments())}\n\n"
                async with anyio.create_task_group() as tasks:

                    async def stop_on_stop() -> None:
                        await self._stopped.wait()
                        tasks.cancel_scope.cancel()

                    tasks.start_soon(stop_on_stop)
                    await self.watcher.next_refresh()
                    tasks.cancel_scope.cancel()
                if not self._running:
                    return

        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        return StreamingResponse(events(), media_type="text/event-stream", headers=headers)

    # --- writes: resets, pauses, resumes, skips ----------------------------------------------

    async def _writable(self, request: Request) -> tuple[dict[str, str], Response | None]:
        """The form, and the refusal to send instead where writes are not allowed."""
        # The page's forms are URL-encoded: parsed here, without python-multipart.
        form = dict(parse_qsl((await request.body()).decode(errors="replace")))
        back = f"{self._root(request)}/groups/{request.path_params['group']}"
        if self._token is None:
            refusal = "refused: this dashboard is read-only (started without --allow-writes)"
        elif not hmac.compare_digest(form.get("token", "").encode(), self._token.encode()):
            refusal = "refused: the token is not this dashboard's"
        else:
            return form, None
        log.warning(
            "%s: a write to group %s (%s) %s",
            _who(request),
            request.path_params["group"],
            request.url.path,
            refusal,
        )
        body = pages.message_page(refusal, back, error=True)
        return form, HTMLResponse(pages.page("Refused", self._root(request), body, None), 403)

    async def _plan(self, request: Request) -> Response:
        form, refusal = await self._writable(request)
        if refusal is not None:
            return refusal
        root, group = self._root(request), request.path_params["group"]
        try:
            zk, kafka = self.watcher.clients()
            target = reset_target(form.get("target", ""), form.get("value", ""))
            plan = await self._resets.plan(
                zk, kafka, group, form.get("topic", ""), target, form.get("partitions", "")
            )
        except AioClusterError as exc:
            body = pages.message_page(str(exc), f"{root}/groups/{group}", error=True)
            return HTMLResponse(pages.page("Not planned", root, body, None), 400)
        return HTMLResponse(pages.page(f"Reset {group}", root, pages.plan_page(plan, root), None))

    async def _store(self, request: Request) -> Response:
        form, refusal = await self._writable(request)
        if refusal is not None:
            return refusal
        root, group = self._root(request), request.path_params["group"]
        back = f"{root}/groups/{group}"
        try:
            zk, _kafka = self.watcher.clients()
            plan = await self._resets.store(
                zk, group, request.path_params["plan"], force=form.get("force") == "1"
            )
        except AioClusterError as exc:
            body = pages.message_page(str(exc), back, error=True)
            return HTMLResponse(pages.page("Not stored", root, body, None), 409)
        log.warning(
            "%s stored a reset of group %s, topic %s: %d partition(s)",
            _who(request),
            group,
            plan.topic,
            len(plan.rows),
        )
        text = f"stored the new offsets of {len(plan.rows)} partition(s) of {plan.topic}"
        return HTMLResponse(
            pages.page(f"Reset {group}", root, pages.message_page(text, back, error=False), None)
        )

    async def _plan_control(self, request: Request) -> Response:
        form, refusal = await self._writable(request)
        if refusal is not None:
            return refusal
        root, group = self._root(request), request.path_params["group"]
        try:
            zk, kafka = self.watcher.clients()
            plan = await self._controls.plan(zk, kafka, group, parse_request(form))
        except AioClusterError as exc:
            body = pages.message_page(str(exc), f"{root}/groups/{group}", error=True)
            return HTMLResponse(pages.page("Not planned", root, body, None), 400)
        title = f"{plan.request.act.capitalize()} {group}"
        return HTMLResponse(pages.page(title, root, pages.control_plan_page(plan, root), None))

    async def _apply_control(self, request: Request) -> Response:
        _form, refusal = await self._writable(request)
        if refusal is not None:
            return refusal
        root, group = self._root(request), request.path_params["group"]
        back = f"{root}/groups/{group}"
        who = _who(request)
        try:
            zk, _kafka = self.watcher.clients()
            done = await self._controls.apply(zk, group, request.path_params["plan"], who)
        except AioClusterError as exc:
            log.warning("%s: nothing written to group %s: %s", who, group, exc)
            body = pages.message_page(str(exc), back, error=True)
            return HTMLResponse(pages.page("Not written", root, body, None), 409)
        log.warning("%s %s", who, done)
        body = pages.message_page(
            f"{done}; the page shows it from its next refresh", back, error=False
        )
        return HTMLResponse(pages.page(group, root, body, None))


def _who(request: Request) -> str:
    """Who writes, as the control history and the log name it: ``dashboard <address>``."""
    return f"dashboard {request.client.host}" if request.client is not None else "dashboard"
