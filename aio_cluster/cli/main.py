"""The ``aio-cluster`` command (also ``python -m aio_cluster``): look at groups and repair them.

::

    aio-cluster list [--json]
    aio-cluster describe GROUP [--topic T ...] [--members] [--json | --watch]
    aio-cluster check GROUP [--topic T ...] [--window 30s] [--json]
    aio-cluster reset-offsets GROUP (--topic T ... | --all-topics) --to-earliest [--partitions 0,3]
        [--execute] [--json]
    aio-cluster pause GROUP [--topic T ...] [--partition P ...] [--json]
    aio-cluster resume GROUP [--topic T ...] [--partition P ...] [--json]
    aio-cluster skip GROUP --topic T --partition P [--to-offset N] [--execute] [--json]
    aio-cluster consume GROUP TOPIC [--from-beginning] [--strategy S]
    aio-cluster consume GROUP TOPIC --isolation-level read_committed
    aio-cluster dashboard [--group G ...] [--host 127.0.0.1] [--port 8080] [--allow-writes]
    aio-cluster local up|down

The servers come from ``--bootstrap`` / ``--zookeeper`` or ``AIO_CLUSTER_BOOTSTRAP`` /
``AIO_CLUSTER_ZOOKEEPER``; a secured ZooKeeper's credentials from ``AIO_CLUSTER_ZOOKEEPER_AUTH``
or ``--zookeeper-auth-file`` (never from the command line, never printed), its TLS settings from
``--zookeeper-cafile`` and friends. A failure is one line on stderr and exit status 1 (2 for bad
arguments; ``check`` exits 2 when it cannot look), never a traceback. The flags and those
variables are resolved once, in `aio_cluster.cli.arguments`, into the typed values that each
subcommand's function here takes. The operator's tools are `aio_cluster.operator`'s: ZooKeeper
is read and written in its ``survey``, a look at a group across both servers is its ``looks``,
what is planned or judged is computed in its ``plans`` and ``health``; what is shown is drawn in
`aio_cluster.cli.tables`. ``pause``, ``resume`` and ``skip`` are `aio_cluster.cli.operate`'s;
``dashboard`` is served by what the console script (`aio_cluster.__main__`) gives `main`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import anyio
from rich.console import Group as Stack
from rich.live import Live
from rich.text import Text

from ..assign.strategies import Strategy
from ..errors import AccessDeniedError, AioClusterError, ConfigurationError, CoordinationError
from ..group import ConsumerGroup
from ..kafka.offset_reader import OffsetReader
from ..local.cli import LocalOptions
from ..operator import looks, survey
from ..operator.connection import Connection
from ..operator.environment import AUTH_VAR, PROG
from ..operator.health import PartitionHealth, Sample, judge, verdict
from ..operator.plans import (
    LagRow,
    PlanRow,
    member_json,
    readers,
    registered_host,
    reset_topics,
)
from ..zookeeper.client import ZooKeeper
from ..zookeeper.layout import GroupLayout, group_path
from . import operate, tables
from .arguments import parse, resolve
from .options import (
    CheckOptions,
    ConsumeOptions,
    DashboardOptions,
    DescribeOptions,
    Invocation,
    ListOptions,
    PauseOptions,
    ResetOptions,
    SkipOptions,
)

__all__ = ["ServeDashboard", "main"]

ServeDashboard = Callable[[Connection, DashboardOptions], Coroutine[Any, Any, int]]
"""What runs the ``dashboard`` subcommand (its exit status): given by the console script,
`aio_cluster.__main__`, which stands above both front ends, so that the command line never
imports the dashboard nor the dashboard the command line."""


def main(argv: Sequence[str] | None = None, *, dashboard: ServeDashboard) -> int:
    """Run the command.

    Args:
        argv: the arguments after the program name; default ``sys.argv[1:]``.
        dashboard: serves the ``dashboard`` subcommand.

    Returns:
        The exit status: 0 on success, 1 on failure (the reason on stderr), 2 on bad arguments.
    """
    args = parse(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(name)s: %(message)s")
    for noisy in ("kazoo", "aiokafka"):  # their connection retries are not the user's business
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
    # A health check that cannot look is as bad as a failing group: it must page.
    failed = 2 if args.command == "check" else 1
    try:
        # every value checked before any server is asked
        return _run(resolve(args), dashboard)
    except AioClusterError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
    except KeyboardInterrupt:  # Ctrl-C before a command set up its own handling of it
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # the promise is one line, never a traceback
        print(f"{PROG}: unexpected {type(exc).__name__}: {exc}", file=sys.stderr)
    return failed


def _run(invocation: Invocation, dashboard: ServeDashboard) -> int:
    """The subcommand's function, with its typed values."""
    options = invocation.options
    if isinstance(options, LocalOptions):
        from ..local.cli import run  # noqa: PLC0415 - only this command needs it

        return run(options)
    connection = invocation.connection
    assert connection is not None
    match options:
        case ListOptions():
            command = _list(connection, options)
        case DescribeOptions():
            command = _describe(connection, options)
        case CheckOptions():
            command = _check(connection, options)
        case ResetOptions():
            command = _reset(connection, options)
        case PauseOptions():
            command = operate.pause(connection, options)
        case SkipOptions():
            command = operate.skip(connection, options)
        case ConsumeOptions():
            command = _consume(connection, options)
        case DashboardOptions():
            command = dashboard(connection, options)
    return asyncio.run(command)


async def _list(connection: Connection, options: ListOptions) -> int:
    rows: list[dict[str, Any]] = []
    async with looks.open_zookeeper(connection) as zk:
        for group in await survey.list_groups(zk):
            members = await survey.read_members(zk, group)
            topics = await survey.group_topics(zk, group, members.values())
            rows.append({"group": group, "topics": topics, "members": len(members)})
    if options.json:
        print(json.dumps(rows, indent=2))
        return 0
    tables.show(tables.groups_table(rows))
    return 0


def _stop_on_signals() -> anyio.Event:
    """An event set by SIGINT or SIGTERM (instead of KeyboardInterrupt)."""
    stop = anyio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def _describe(connection: Connection, options: DescribeOptions) -> int:
    async with looks.open_zookeeper(connection) as zk, looks.open_kafka(connection) as kafka:
        await survey.require_group(zk, options.group)
        look = await looks.look(zk, kafka, options.group, options.topics)
        if options.watch:
            await _watch(zk, kafka, options, look)
            return 0
    members, rows, notes = look
    if options.json:
        _notes_to_stderr(notes)
    if options.json and options.members:
        owned = _owned(rows)
        print(
            json.dumps(
                [
                    member_json(m, registered_host(options.group, m, info), info, owned[m])
                    for m, info in sorted(members.items())
                ],
                indent=2,
            )
        )
        return 0
    if options.json:
        print(json.dumps([row.as_json() for row in rows], indent=2))
        return 0
    tables.show(_describe_view(options.group, look, members_only=options.members))
    return 0


def _owned(rows: Sequence[LagRow]) -> Counter[str]:
    """member id -> how many of the rows' partitions it owns."""
    return Counter(row.owner for row in rows if row.owner is not None)


def _describe_view(group: str, look: looks.Look, *, members_only: bool = False) -> Stack:
    members, rows, notes = look
    shown = tables.members_table(group, members, _owned(rows))
    if members_only:
        return Stack(shown)
    return Stack(shown, tables.lag_table(rows), *(Text(note) for note in notes))


async def _watch(
    zk: ZooKeeper,
    kafka: OffsetReader,
    options: DescribeOptions,
    first: looks.Look,
) -> None:
    """Redraw ``describe`` in place every ``options.interval`` seconds until SIGINT or
    SIGTERM."""
    stop = _stop_on_signals()
    with Live(
        _describe_view(options.group, first, members_only=options.members),
        console=tables.console(),
        auto_refresh=False,
    ) as live:
        live.refresh()
        while True:
            with anyio.move_on_after(options.interval):
                await stop.wait()
            if stop.is_set():
                return
            look = await looks.look(zk, kafka, options.group, options.topics)
            live.update(_describe_view(options.group, look, members_only=options.members))
            live.refresh()


async def _check(connection: Connection, options: CheckOptions) -> int:
    window, count = options.window, options.samples
    samples: dict[tuple[str, int], list[Sample]] = {}
    async with looks.open_zookeeper(connection) as zk, looks.open_kafka(connection) as kafka:
        await survey.require_group(zk, options.group)
        loop = asyncio.get_running_loop()
        start = loop.time()
        notes: list[str] = []
        for number in range(count):
            # Evenly over the window: the first look at its start, the last at its end.
            await asyncio.sleep(max(start + window * number / (count - 1) - loop.time(), 0))
            _members, rows, notes = await looks.look(zk, kafka, options.group, options.topics)
            for row in rows:
                samples.setdefault((row.topic, row.partition), []).append(row.sample())
            if options.verbose:
                print(f"{PROG}: sample {number + 1} of {count} taken", file=sys.stderr)
    findings = [
        judge(topic, partition, seen, options.thresholds)
        for (topic, partition), seen in sorted(samples.items())
        if len(seen) >= 2  # a partition created during the window is judged next time
    ]
    worst = verdict(findings)
    if options.json:
        print(json.dumps([finding.as_json() for finding in findings], indent=2))
        _notes_to_stderr(notes)
    else:
        tables.show(tables.health_table(findings))
        for note in notes:
            tables.show(Text(note))
        tables.show(_verdict_line(options.group, findings, window))
    return int(worst)


def _notes_to_stderr(notes: Sequence[str]) -> None:
    """With ``--json``, what the look could not show (an unreadable node, say) goes to stderr,
    so that stdout stays the JSON."""
    for note in notes:
        print(f"{PROG}: {note}", file=sys.stderr)


def _verdict_line(group: str, findings: list[PartitionHealth], window: float) -> str:
    worst = verdict(findings)
    bad = [f for f in findings if f.severity > 0]
    if not bad:
        return (
            f"{worst.name.lower()}: group {group}, {len(findings)} partition(s) over {window:g} s"
        )
    named = ", ".join(f"{f.topic}/{f.partition} " + (f.detail() or f.status.value) for f in bad)
    return f"{worst.name.lower()}: group {group}: {named}"


_RESET_ATTEMPTS = 3
"""Plans a reset makes before it refuses, when members keep storing offsets meanwhile."""


async def _reset(connection: Connection, options: ResetOptions) -> int:
    """Plan a reset and, with ``--execute``, store it, every topic in one transaction. The write
    bumps every partition's claim fence, so a member that claimed before it (even between the
    plan and the write) can never store the offset it held; when an offset changed between the
    plan and the write, the plan is made again from what is stored now (refused after
    `_RESET_ATTEMPTS`)."""
    group, target, wanted = options.group, options.target, options.partitions
    async with looks.open_zookeeper(connection) as zk, looks.open_kafka(connection) as kafka:
        await survey.require_group(zk, group)
        members = await survey.read_members(zk, group)
        held = await survey.group_topics(zk, group, members.values())
        topics = reset_topics(group, list(options.topics) or None, options.all_topics, held)
        if wanted is not None and len(topics) != 1:
            raise ConfigurationError(
                f"--partitions needs one topic (partitions are numbered per topic), not "
                f"{len(topics)}: {', '.join(topics)}"
            )
        layouts = {topic: GroupLayout(group, topic) for topic in topics}
        # With --all-topics, a topic deleted from Kafka keeps its nodes; it has no bounds to
        # plan within, so it is left as it is (and said so), not a reason to reset nothing.
        missing: list[str] = []
        if options.all_topics:
            for topic in topics:
                try:
                    await kafka.partitions(topic)
                except ConfigurationError:
                    missing.append(topic)
            for topic in missing:
                print(
                    f"{PROG}: topic {topic} does not exist in Kafka: its offsets are left "
                    "as they are",
                    file=sys.stderr,
                )
            topics = [topic for topic in topics if topic not in missing]
            if not topics:
                raise ConfigurationError(
                    f"none of the topics of group {group!r} exists in Kafka: nothing to reset"
                )
        where = layouts[topics[0]].offsets if len(topics) == 1 else group_path(group)
        for attempt in range(1, _RESET_ATTEMPTS + 1):
            members = await survey.read_members(zk, group)
            plans: dict[str, list[PlanRow]] = {}
            versions: dict[str, dict[int, int]] = {}
            for topic in topics:
                plans[topic], versions[topic] = await looks.plan_topic(
                    zk, kafka, layouts[topic], target, wanted, execute=options.execute
                )
            active = {topic: readers(members, topic) for topic in topics}
            registered = sorted({m for ids in active.values() for m in ids})
            if not options.json:
                tables.show(tables.plan_table(plans))
            if not options.execute:
                if options.json:
                    rows = [
                        row.as_json(topic, stored=False)
                        for topic, plan in plans.items()
                        for row in plan
                    ]
                    print(json.dumps(rows, indent=2))
                    return 0
                tables.show("dry run: nothing changed; add --execute to store this plan")
                if registered:
                    tables.show(
                        f"note: {len(registered)} member(s) registered: --execute needs --force"
                    )
                return 0
            if registered and not options.force:
                named = ", ".join(
                    f"{len(ids)} member(s) registered for {topic!r} ({', '.join(ids)})"
                    for topic, ids in active.items()
                    if ids
                )
                raise ConfigurationError(
                    f"refused: group {group!r} has {named}; they would overwrite the new "
                    "offsets. Stop them first, or pass --force"
                )
            writes = {
                layouts[topic]: ({row.partition: row.new for row in plan}, versions[topic])
                for topic, plan in plans.items()
            }
            if await looks.refusable(where, survey.write_offsets(zk, writes)):
                break
            if attempt < _RESET_ATTEMPTS:
                print(
                    f"{PROG}: the stored offsets changed meanwhile: planning again",
                    file=sys.stderr,
                )
        else:
            raise CoordinationError(
                f"refused: the stored offsets of group {group!r} kept changing while the "
                f"reset was planned ({_RESET_ATTEMPTS} plans); stop its members first"
            )
    # Kafka's offsets follow (an exactly-once group starts from them): written once ZooKeeper
    # holds the reset, so that a failure here leaves ZooKeeper right and says so.
    moved = await looks.kafka_follows(connection, group, plans)
    if options.json:
        stored = [row.as_json(topic, stored=True) for topic, plan in plans.items() for row in plan]
        print(json.dumps(stored, indent=2))
    else:
        count = sum(len(plan) for plan in plans.values())
        tables.show(f"stored the new offsets of {count} partition(s) of {len(plans)} topic(s)")
        if moved:
            tables.show(f"and the group's offsets in Kafka of {moved} partition(s)")
    return 0


async def _consume(connection: Connection, options: ConsumeOptions) -> int:
    stop = _stop_on_signals()
    strategy = options.strategy or await _group_strategy(connection, options)
    group = ConsumerGroup(
        options.group,
        connection.bootstrap_address(),
        connection.zookeeper_address(),
        options.topic,
        trail=not options.from_beginning,
        request_timeout=connection.timeout,
        kafka_options=connection.kafka,
        # An operator who names a topic that does not exist wants to hear so, not to wait.
        wait_for_topic=False,
        strategy=strategy,
        zookeeper_security=connection.security,
        register=False,
        isolation_level=options.isolation_level,
    )
    async with group:
        await _join(group)
        async with anyio.create_task_group() as tasks:

            async def stop_on_signal() -> None:
                await stop.wait()
                tasks.cancel_scope.cancel()

            tasks.start_soon(stop_on_signal)
            async for partition, batch in group:
                for record in batch:
                    key = "" if record.key is None else record.key.decode(errors="replace")
                    value = "" if record.value is None else record.value.decode(errors="replace")
                    sys.stdout.write(f"{partition}\t{record.offset}\t{key}\t{value}\n")
                sys.stdout.flush()
            tasks.cancel_scope.cancel()  # the group closed under us: nothing more to wait for
    # Leaving the group (async with) stored the offsets of every printed batch.
    return 0


async def _join(group: ConsumerGroup) -> None:
    """Register the member; a failure is the command's one line, not also the member's log."""
    group_log = logging.getLogger("aio_cluster.member.member")
    level = group_log.level
    group_log.setLevel(logging.CRITICAL)
    try:
        await group.register()
    except AccessDeniedError as exc:
        raise AccessDeniedError(
            f"refused by ZooKeeper: {exc}; pass the group's credentials (${AUTH_VAR} or "
            "--zookeeper-auth-file)"
        ) from None
    finally:
        group_log.setLevel(level)


async def _group_strategy(connection: Connection, options: ConsumeOptions) -> Strategy:
    """The strategy of the group's registered members, so that joining is never refused for
    a mismatch; sticky, the library's default, where none is registered."""
    async with looks.open_zookeeper(connection) as zk:
        members = await survey.read_members(zk, options.group)
    for info in members.values():
        if (
            info is not None
            and info.subscribes(options.topic)
            and isinstance(info.strategy, Strategy)
        ):
            return info.strategy
    return Strategy.STICKY
