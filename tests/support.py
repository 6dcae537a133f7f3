"""Helpers for the integration tests, one home each: polling with a deadline, fresh names and
topics, a member with the tests' short delays, pulling records, the group-wide ownership check,
the stored offsets, and processes that are killed whatever the test's outcome."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import gc
import itertools
import json
import math
import os
import shutil
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.conn import AIOKafkaConnection
from aiokafka.errors import KafkaConnectionError
from aiokafka.protocol.metadata import MetadataRequest

from aio_cluster import Batch, ConsumerGroup, Record
from aio_cluster.kafka.fetcher import Fetcher
from aio_cluster.kafka.group_offsets import KafkaGroupOffsets
from aio_cluster.kafka.topics import PartitionKey, TopicKeys
from aio_cluster.local import LocalCluster
from aio_cluster.local.jars import default_cache_dir, resolve_jars
from aio_cluster.zookeeper.client import NoNodeError, ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from member_worker import OPTIONS_VARIABLE

T = TypeVar("T")

Pairs = AsyncIterator[tuple[int, Batch]]
"""What ``ConsumerGroup.batches()`` yields: ``(partition, batch)``."""

_names = itertools.count(1)


async def wait_until(
    condition: Callable[[], Awaitable[bool] | bool], *, timeout: float = 30.0, what: str = ""
) -> None:
    """Poll ``condition`` until it holds; fail the test after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = condition()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what or condition}")
        await asyncio.sleep(0.05)


async def stubborn(answer: asyncio.Future[T], waits: Callable[[int], object] | None = None) -> T:
    """Wait for ``answer`` whatever cancels the wait, and return it: a call that finishes its
    request after its cancellation. ``waits`` is told before each wait how many cancellations
    cut its waits so far."""
    cuts = 0
    while True:
        if waits is not None:
            waits(cuts)
        try:
            return await asyncio.shield(answer)
        except asyncio.CancelledError:
            if answer.done():
                return answer.result()
            cuts += 1


def awaiting(task: asyncio.Task[Any]) -> list[str]:
    """Where ``task`` waits: the coroutines of its chain of awaits, outermost first (a task's
    own stack shows only its outermost coroutine while it is suspended)."""
    where: list[str] = []
    awaited: Any = task.get_coro()
    while awaited is not None:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
        if frame is not None:
            code = frame.f_code
            where.append(f"{code.co_filename}:{frame.f_lineno} {code.co_name}")
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    return where


def tasks_waiting() -> str:
    """Where every task of the loop waits (`awaiting()`): what a hang needs to be told apart."""
    return "".join(
        "\n  ".join([f"{task.get_name()}, waiting in:", *awaiting(task)]) + "\n"
        for task in asyncio.all_tasks()
    )


async def within(awaitable: Awaitable[T], timeout: float, what: str) -> T:
    """Await ``awaitable`` for up to ``timeout`` seconds. On time-out, first print the stack of
    every task of the loop to stderr (what the awaited work and the members were waiting on, the
    one clue a rare hang leaves), then fail the test."""
    task = asyncio.ensure_future(awaitable)
    done, _pending = await asyncio.wait({task}, timeout=timeout)
    if task in done:
        return task.result()
    print(f"--- {what}: still waiting after {timeout:g}s; the loop's tasks:", file=sys.stderr)
    print(tasks_waiting(), end="", file=sys.stderr)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def fetcher_of(
    cluster: LocalCluster,
    topic: str,
    client_id: str,
    *,
    max_bytes: int = 1 << 20,
    max_wait_ms: int = 100,
    **more: Any,
) -> Fetcher:
    """A member's Fetcher of one topic, on its own (start and stop it)."""
    return Fetcher(
        cluster.bootstrap,
        keys=TopicKeys((topic,)),
        client_id=client_id,
        max_bytes=max_bytes,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        **more,
    )


def fresh(prefix: str) -> str:
    """A name no other test (nor an earlier run against the same servers) has used."""
    return f"{prefix}-{os.getpid()}-{next(_names)}-{uuid.uuid4().hex[:8]}"


# --- Kafka ----------------------------------------------------------------------------------------


async def topic_known(admin: AIOKafkaAdminClient, topic: str) -> bool:
    """Whether the broker's metadata has the topic: it learns of one a moment after its
    controller created it (KRaft), and a member asking before is told the topic does not exist
    (seen under load)."""
    (described,) = await admin.describe_topics([topic])
    return not described["error_code"]


async def add_topic(
    admin: AIOKafkaAdminClient,
    partitions: int = 1,
    *,
    replicas: int = 1,
    prefix: str = "topic",
    configs: Mapping[str, str] | None = None,
) -> str:
    """Create a fresh topic through ``admin`` (with the topic ``configs`` given) and return its
    name once the broker knows it."""
    name = fresh(prefix)
    await admin.create_topics([NewTopic(name, partitions, replicas, topic_configs=configs or {})])
    await wait_until(lambda: topic_known(admin, name), what=f"the broker knows {name}")
    return name


async def create_topic(
    bootstrap: str,
    partitions: int = 1,
    *,
    replicas: int = 1,
    prefix: str = "topic",
    kafka_options: Mapping[str, Any] | None = None,
) -> str:
    """`add_topic` through an admin client of its own, for a cluster other than the session's
    (a TLS or SASL one: pass its ``kafka_options``)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **(kafka_options or {}))
    await admin.start()
    try:
        return await add_topic(admin, partitions, replicas=replicas, prefix=prefix)
    finally:
        await admin.close()


@dataclass
class Sent:
    """One request an aiokafka connection sent (see `KafkaWire`)."""

    client_id: str
    request: Any
    answered: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once its answer came (or it failed)."""

    @property
    def metadata_topics(self) -> list[str] | None:
        """The topics a metadata request asks (None: every topic of the cluster)."""
        topics: list[str] | None = self.request._topics  # aiokafka has no public attribute for it
        return topics


class KafkaWire:
    """Every request aiokafka's connections send to the real server, as it goes out, for a test to
    count what its clients ask Kafka (told apart by client id) and when each answer came; the
    test may also refuse some (`refuse`) or change the answers (`answer`). Installed on every
    aiokafka connection of the process by ``KafkaWire(monkeypatch)``, until the test ends."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent: list[Sent] = []
        self.refuse: Callable[[Sent], bool] | None = None
        """A request it says True of fails as a broken connection would."""
        self.answer: Callable[[Any, Any], None] | None = None
        """Called with each request and its answer, which it may change in place."""
        original = AIOKafkaConnection.send
        wire = self

        def send(conn: Any, request: Any, expect_response: bool = True) -> Awaitable[Any]:
            sent = Sent(conn._client_id, request)  # aiokafka has no public attribute for it
            wire.sent.append(sent)
            try:
                if wire.refuse is not None and wire.refuse(sent):
                    raise KafkaConnectionError(f"refused by the test: {type(request).__name__}")
                pending = original(conn, request, expect_response)
            except BaseException:
                sent.answered.set()
                raise

            async def answered() -> Any:
                try:
                    response = await pending
                    if wire.answer is not None and response is not None:
                        wire.answer(request, response)
                    return response
                finally:
                    sent.answered.set()

            return answered()

        monkeypatch.setattr(AIOKafkaConnection, "send", send)

    def of(self, client_id: str, kind: type | None = None) -> list[Sent]:
        """The requests of the clients whose id starts with ``client_id``, of ``kind``."""
        return [
            sent
            for sent in self.sent
            if sent.client_id.startswith(client_id)
            and (kind is None or isinstance(sent.request, kind))
        ]

    def metadata(self, client_id: str) -> list[list[str] | None]:
        """The topics each metadata request of those clients asked, in order (None: every
        topic; an empty list: none, as a bootstrap asks)."""
        return [sent.metadata_topics for sent in self.of(client_id, MetadataRequest)]


LEADER_NOT_AVAILABLE = 5
"""Kafka's error code LEADER_NOT_AVAILABLE: the topic is there, its leader is moving."""


def leaderless(topic: str) -> Callable[[Any, Any], None]:
    """An answer changer for `KafkaWire.answer`: Kafka answers ``topic``'s metadata with
    LEADER_NOT_AVAILABLE and no partitions, in a listing and asked on its own, as while its
    leader moves."""

    def answer(request: Any, response: Any) -> None:
        if isinstance(request, MetadataRequest):
            response.topics = [
                (LEADER_NOT_AVAILABLE, topic, *entry[2:-1], []) if entry[1] == topic else entry
                for entry in response.topics
            ]

    return answer


@contextlib.asynccontextmanager
async def producer_of(cluster: LocalCluster) -> AsyncIterator[AIOKafkaProducer]:
    """A started producer for ``cluster`` (over its TLS or SASL where it has them)."""
    producer = AIOKafkaProducer(
        bootstrap_servers=cluster.bootstrap, linger_ms=5, **cluster.kafka_options
    )
    await producer.start()
    try:
        yield producer
    finally:
        await producer.stop()


# --- members --------------------------------------------------------------------------------------


def member(cluster: LocalCluster, group: str, topic: str, **options: Any) -> ConsumerGroup:
    """A member of ``group`` on ``cluster``, with the tests' short loop delay and claim timeout,
    the cluster's Kafka security options, and ``options`` over those (``zookeepers=`` too)."""
    options.setdefault("loop_delay", 0.1)
    options.setdefault("claim_timeout", 10.0)
    if cluster.kafka_options:
        options.setdefault("kafka_options", cluster.kafka_options)
    zookeepers = options.pop("zookeepers", cluster.zookeeper)
    return ConsumerGroup(group, cluster.bootstrap, zookeepers, topic, **options)


def closable(batches: AsyncIterator[T]) -> AsyncGenerator[T, Any]:
    """``batches`` as what ``ConsumerGroup.batches()`` returns, an async generator, so that a test
    can ``aclose()`` it (the method is annotated as returning an iterator)."""
    assert isinstance(batches, AsyncGenerator)
    return batches


async def take(batches: Pairs, count: int, *, timeout: float = 60.0) -> list[tuple[int, Record]]:
    """``(partition, record)`` from ``batches`` until at least ``count`` records came; fails the
    test after ``timeout`` seconds. Asking the same iterator for more later commits the last
    batch; a fresh loop would get it again (the commit rule)."""
    got: list[tuple[int, Record]] = []

    async def pull() -> None:
        while len(got) < count:
            partition, batch = await anext(batches)
            got.extend((partition, record) for record in batch)

    await asyncio.wait_for(pull(), timeout)
    return got


async def batch_of(batches: Pairs, partition: int) -> Batch:
    """The next batch of ``partition`` from ``batches``, passing over those of others."""
    while True:
        got, batch = await anext(batches)
        if got == partition:
            return batch


# --- ZooKeeper ------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def observed(cluster: LocalCluster) -> AsyncIterator[ZooKeeper]:
    """A started ZooKeeper client of ``cluster`` of its own (a session apart from the
    members'), to watch the group with."""
    observer = ZooKeeper(cluster.zookeeper, session_timeout=30.0)
    await observer.start()
    try:
        yield observer
    finally:
        await observer.close()


async def stored_offsets(zk: ZooKeeper, layout: GroupLayout, partitions: int) -> dict[int, int]:
    """partition -> the offset stored for it, of the first ``partitions`` (those stored), as
    the ensemble committed them: the members that stored them are other clients, whose writes
    a server answering this session's reads may not have applied yet (with several servers)."""
    await zk.sync()
    found: dict[int, int] = {}
    for partition in range(partitions):
        try:
            data, _stat = await zk.get(layout.offset(partition))
        except NoNodeError:
            continue
        found[partition] = int(data)
    return found


async def owners(zk: ZooKeeper, layout: GroupLayout, partitions: Sequence[int]) -> dict[int, str]:
    """partition -> the member id its claim node holds (claims that exist)."""
    found: dict[int, str] = {}
    for partition in partitions:
        try:
            data, _stat = await zk.get(layout.owner(partition))
        except NoNodeError:
            continue
        found[partition] = data.decode()
    return found


async def settled(zk: ZooKeeper, members: Sequence[ConsumerGroup]) -> bool:
    """Every partition is claimed by exactly one of ``members``, and their ``claimed`` lists
    agree with the owner nodes in ZooKeeper."""
    first = members[0]
    partitions = first.partitions
    layout = GroupLayout(first.name, first.topic)
    claimed = [p for member in members for p in member.claimed]
    if sorted(claimed) != partitions:
        return False
    by_node = await owners(zk, layout, partitions)
    by_member = {p: member.id for member in members for p in member.claimed}
    return by_node == by_member


def parsed(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse`` with the garbage collector off: CPython 3.11.7 raises ``SystemError: AST
    constructor recursion depth mismatch`` when a finalizer runs inside it, as an earlier test's
    Kafka clients in reference cycles do (their futures log what they hold)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source, filename)
    finally:
        if collecting:
            gc.enable()


# --- processes ------------------------------------------------------------------------------------


async def kill(process: asyncio.subprocess.Process) -> None:
    """SIGKILL ``process`` unless it ended, and reap it."""
    if process.returncode is None:
        process.kill()
    await process.wait()


@contextlib.asynccontextmanager
async def running(
    *command: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    stdout: Any = None,
    stderr: Any = None,
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``command`` as a process for the block, killed and reaped after it unless it ended: a
    failing test leaves none behind. ``stdout``/``stderr`` as for
    ``asyncio.create_subprocess_exec``."""
    process = await asyncio.create_subprocess_exec(
        *command, env=env, cwd=cwd, stdout=stdout, stderr=stderr
    )
    try:
        yield process
    finally:
        await kill(process)


WORKER = Path(__file__).with_name("member_worker.py")


def now() -> float:
    """The clock of the workers' run logs (CLOCK_MONOTONIC: one for every process of a Linux
    machine), read by the test process to place a worker's death among its runs."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


@dataclass(frozen=True)
class Run:
    """One handler run of a ``process`` worker, as its log tells it (times from `now()`)."""

    member: str
    partition: int
    offset: int
    key: str
    value: str
    started: float
    ended: float
    """When the handler returned; for a run its process never ended (killed), when the process
    was reaped (no later than the run's end); infinite while the process lives."""
    outcome: str
    """``done``, ``cancelled`` (by the member), or ``unended`` (the process ended first)."""


def worker_env(options: Mapping[str, object] | None) -> dict[str, str] | None:
    """The environment of a member process (``member_worker.py``) given more `ConsumerGroup`
    ``options`` (JSON in its `OPTIONS_VARIABLE`); None (this process's) without."""
    if not options:
        return None
    return {**os.environ, OPTIONS_VARIABLE: json.dumps(dict(options))}


class Worker:
    """A member process and the records it wrote."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.process: asyncio.subprocess.Process | None = None
        self.mode = ""
        self.gone_at = math.inf
        """When the process was seen to have ended (`now()`)."""

    async def start(
        self,
        cluster: LocalCluster,
        topic: str,
        group: str,
        mode: str,
        session: float = 10.0,
        *,
        name: str | None = None,
        grace: float = 0.0,
        zookeeper: str | None = None,
        bootstrap: str | None = None,
        options: Mapping[str, object] | None = None,
        release: Path | None = None,
    ) -> None:
        """Start the member process and wait for it to join; ``name`` and ``grace`` make it a
        named member (``member_name``, ``rejoin_grace``); ``zookeeper`` is the address it is
        given for ZooKeeper (a `aio_cluster.local.FaultProxy`'s; default the cluster's) and
        ``bootstrap`` for Kafka (a `aio_cluster.local.KafkaProxies`'; default the cluster's);
        ``options`` are more `ConsumerGroup` options (see `worker_env`); ``release`` is a
        directory holding another release's ``aio_cluster`` to run instead of this one (a
        mixed group)."""
        named = [] if name is None else [name, str(grace)]
        env = worker_env(options)
        if release is not None:
            paths = [str(release), *filter(None, [os.environ.get("PYTHONPATH")])]
            env = {**(env or os.environ), "PYTHONPATH": os.pathsep.join(paths)}
        self.mode = mode
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(WORKER),
            bootstrap or cluster.bootstrap,
            zookeeper or cluster.zookeeper,
            topic,
            group,
            str(self.out),
            mode,
            str(session),
            *named,
            stdout=asyncio.subprocess.PIPE,
            env=env,
        )
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), 60)
        assert line == b"joined\n", f"worker did not join: {line!r}"

    async def leave(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(self.process.wait(), 60) == 0
        self.gone_at = now()

    def kill(self) -> None:
        """SIGKILL: the member dies without a word; its claims go with its session."""
        if self.process is not None and self.process.returncode is None:
            self.process.kill()

    async def reap(self) -> None:
        if self.process is not None:
            await self.process.wait()
            self.gone_at = min(self.gone_at, now())

    def consumed_keys(self) -> list[str]:
        """The keys of the records it consumed (in ``process`` mode: whose handler returned)."""
        if self.mode == "process":
            return [run.key for run in self.runs() if run.outcome == "done"]
        if not self.out.exists():
            return []
        return [line.split()[2] for line in self.out.read_text().splitlines()]

    def runs(self) -> list[Run]:
        """The handler runs of a ``process`` worker, in the order they started."""
        if not self.out.exists():
            return []
        started: dict[str, list[str]] = {}
        ends: dict[str, tuple[float, str]] = {}
        text = self.out.read_text()
        # A line being written as the file is read is taken at the next read.
        for line in text[: text.rfind("\n") + 1].splitlines():
            event, run, *fields = line.split()
            if event == "start":
                started[run] = fields
            else:
                ends[run] = (float(fields[0]), event)
        found: list[Run] = []
        for run, (clock, member, partition, offset, key, value) in started.items():
            ended, outcome = ends.get(run, (self.gone_at, "unended"))
            found.append(
                Run(member, int(partition), int(offset), key, value, float(clock), ended, outcome)
            )
        return found


def partition_overlaps(runs: Iterable[Run]) -> list[tuple[Run, Run]]:
    """Pairs of runs of one partition by different members that overlap in time: the second
    started before the first ended (a partition has one owner at a time)."""
    by_partition: dict[int, list[Run]] = {}
    for run in runs:
        by_partition.setdefault(run.partition, []).append(run)
    found: list[tuple[Run, Run]] = []
    for of_partition in by_partition.values():
        latest: dict[str, Run] = {}  # member -> its run that ends last of those started so far
        for run in sorted(of_partition, key=lambda run: run.started):
            found.extend(
                (other, run)
                for member, other in latest.items()
                if member != run.member and other.ended > run.started
            )
            if run.member not in latest or run.ended > latest[run.member].ended:
                latest[run.member] = run
    return found


def numbered_by(producer: AIOKafkaProducer, topic: str) -> Callable[[int, int], Awaitable[None]]:
    """``produce(start, count)``: the messages ``k<start>`` ... to ``topic`` (key ``k<i>``, value
    ``<i>``), written by ``producer``."""

    async def produce(start: int, count: int) -> None:
        for i in range(start, start + count):
            await producer.send(topic, key=f"k{i}".encode(), value=str(i).encode())
        await producer.flush()

    return produce


async def consume_exactly_once(
    members: Sequence[ConsumerGroup],
    produce: Callable[[int, int], Awaitable[None]],
    total: int,
    *,
    joined: Callable[[], Awaitable[object]] | None = None,
) -> None:
    """Join ``members``, produce ``total`` numbered messages with ``produce(start, count)`` (keys
    ``k<i>``; half before the joins, half after; see `numbered_by`) and consume them all with
    every member at once: each must be delivered exactly once. ``joined`` runs once every member
    has joined."""
    seen: Counter[bytes] = Counter()

    async def consume(group: ConsumerGroup) -> None:
        async for _, batch in group:
            seen.update(record.key for record in batch if record.key is not None)

    half = total // 2
    await produce(0, half)
    async with contextlib.AsyncExitStack() as stack:
        for group in members:
            await stack.enter_async_context(group)
        if joined is not None:
            await joined()
        consumers = [asyncio.ensure_future(consume(group)) for group in members]
        try:
            await produce(half, total - half)
            await wait_until(lambda: sum(seen.values()) >= total, what=f"all {total} messages")
        finally:
            for group in members:
                await group.close()
            await asyncio.gather(*consumers)
    assert sorted(seen) == sorted(f"k{i}".encode() for i in range(total)), "a message was lost"
    assert set(seen.values()) == {1}, "a message was delivered twice"


# --- Kafka's view ---------------------------------------------------------------------------------


async def in_kafka(cluster: LocalCluster, group: str, topic: str) -> dict[PartitionKey, int]:
    """The offsets Kafka holds for the group in partitions 0 and 1 of ``topic`` (those
    committed)."""
    offsets = KafkaGroupOffsets(cluster.bootstrap, group, TopicKeys((topic,)), client_id="test")
    await offsets.start()
    try:
        return await offsets.committed([PartitionKey(0), PartitionKey(1)], 10)
    finally:
        await offsets.stop()


CONSUMER_GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


async def kafka_tool(main: str, *arguments: str) -> tuple[int | None, bytes, bytes]:
    """One of Kafka's command-line tools (the class ``main``, as its ``kafka-*.sh`` script
    runs it), run with ``java`` from the kafka-tools jar: its exit status, output and error
    output."""
    java = shutil.which("java")
    assert java is not None
    tools = await resolve_jars(default_cache_dir(), "tools")
    process = await asyncio.create_subprocess_exec(
        *(java, "-cp", f"{tools}/*", main),
        *arguments,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    return process.returncode, out, err


async def kafka_tool_describe(
    cluster: LocalCluster, group: str
) -> dict[tuple[str, int], tuple[int, int, int]]:
    """``kafka-consumer-groups.sh --describe --group G``, run with ``java`` from Kafka's
    kafka-tools jar: (topic, partition) -> (current offset, log-end offset, lag)."""
    status, out, err = await kafka_tool(
        CONSUMER_GROUPS, "--bootstrap-server", cluster.bootstrap, "--describe", "--group", group
    )
    assert status == 0, err.decode()
    rows = {}
    for line in out.decode().splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[0] == group:
            rows[(fields[1], int(fields[2]))] = (int(fields[3]), int(fields[4]), int(fields[5]))
    return rows
