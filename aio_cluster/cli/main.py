"""The ``aio-cluster`` command (also ``python -m aio_cluster``): look at groups and repair them.

::

    aio-cluster list
    aio-cluster describe GROUP [--topic T] [--json]
    aio-cluster reset-offsets GROUP --topic T --to-earliest [--partitions 0,3] [--execute]
    aio-cluster consume GROUP TOPIC [--from-beginning]
    aio-cluster local up|down

The servers come from ``--bootstrap`` / ``--zookeeper`` or ``AIO_CLUSTER_BOOTSTRAP`` /
``AIO_CLUSTER_ZOOKEEPER``. A failure is one line on stderr and exit status 1 (2 for bad
arguments), never a traceback. ZooKeeper is read and written in `aio_cluster.cli.survey`, Kafka
in `aio_cluster.kafka`; what is shown or planned is computed in `aio_cluster.cli.plans` and drawn
in `aio_cluster.cli.tables`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, NoReturn

import anyio

from ..errors import AioClusterError, ConfigurationError
from ..group import ConsumerGroup
from ..kafka.offset_reader import OffsetReader
from ..kafka.options import KafkaOptions
from ..zookeeper.client import ZooKeeper
from ..zookeeper.layout import GroupLayout
from . import survey, tables
from .plans import (
    LagRow,
    ResetTarget,
    ShiftBy,
    ToEarliest,
    ToLatest,
    ToOffset,
    ToTime,
    Unreadable,
    lag_rows,
    parse_partitions,
    parse_timestamp,
    plan_reset,
    select_partitions,
)

__all__ = ["main"]

_PROG = "aio-cluster"
_BOOTSTRAP_VAR = "AIO_CLUSTER_BOOTSTRAP"
_ZOOKEEPER_VAR = "AIO_CLUSTER_ZOOKEEPER"


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (and exit status 2)."""

    hides_unrecognized = False
    """Name no unrecognized argument: after ``--kafka-option sasl_plain_password`` (no ``=``)
    the stray one is the password."""

    def error(self, message: str) -> NoReturn:
        if self.hides_unrecognized and message.startswith("unrecognized arguments"):
            message = (
                "unrecognized arguments (not shown: one may be the value of a --kafka-option; "
                "write it as KEY=VALUE)"
            )
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command.

    Args:
        argv: the arguments after the program name; default ``sys.argv[1:]``.

    Returns:
        The exit status: 0 on success, 1 on failure (the reason on stderr), 2 on bad arguments.
    """
    parser = _parser()
    given = sys.argv[1:] if argv is None else argv
    parser.hides_unrecognized = any(arg.startswith("--kafka-option") for arg in given)
    args = parser.parse_args(given)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(name)s: %(message)s")
    for noisy in ("kazoo", "aiokafka"):  # their connection retries are not the user's business
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        if getattr(args, "kafka_option", None) or getattr(args, "ssl_cafile", None):
            _kafka_options(args)  # checked before any server is asked
        return run(args)
    except AioClusterError as exc:
        print(f"{_PROG}: {exc}", file=sys.stderr)
    except KeyboardInterrupt:  # Ctrl-C before a command set up its own handling of it
        print(f"{_PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # the promise is one line, never a traceback
        print(f"{_PROG}: unexpected {type(exc).__name__}: {exc}", file=sys.stderr)
    return 1


def _parser() -> _Parser:
    servers = _Parser(add_help=False)
    servers.add_argument("--bootstrap", help=f"Kafka servers, host:port (or ${_BOOTSTRAP_VAR})")
    servers.add_argument("--zookeeper", help=f"ZooKeeper servers (or ${_ZOOKEEPER_VAR})")
    servers.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for a server (default 10)"
    )
    servers.add_argument(
        "--kafka-option",
        action="append",
        metavar="KEY=VALUE",
        help="a Kafka connection option by aiokafka's name (security_protocol, sasl_mechanism, "
        "sasl_plain_username, ...); repeatable",
    )
    servers.add_argument("--ssl-cafile", help="a PEM file of the CAs to trust for Kafka over TLS")
    parser = _Parser(prog=_PROG, description="Look at and repair aio_cluster consumer groups.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    listing = commands.add_parser("list", parents=[servers], help="the groups in ZooKeeper")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    listing.set_defaults(run=lambda args: asyncio.run(_list(args)))

    describe = commands.add_parser(
        "describe", parents=[servers], help="a group's members, and per partition its lag"
    )
    describe.add_argument("group")
    describe.add_argument("--topic", help="only this topic (default: all of the group's)")
    describe.add_argument(
        "--json", action="store_true", help="print the partitions as a JSON list instead"
    )
    describe.set_defaults(run=lambda args: asyncio.run(_describe(args)))

    reset = commands.add_parser(
        "reset-offsets",
        parents=[servers],
        help="move a group's stored offsets (a plan unless --execute)",
        description="Print the plan (partition, old, new); with --execute store it. Refused while "
        "members are registered, unless --force. Also repairs a corrupted offset node.",
    )
    reset.add_argument("group")
    reset.add_argument("--topic", required=True)
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the earliest retained offset")
    to.add_argument("--to-latest", action="store_true", help="the log end: skip everything")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N")
    to.add_argument("--to-datetime", metavar="ISO8601", help="the first record at or after it")
    to.add_argument("--shift-by", type=int, metavar="N", help="N records on (negative: back)")
    reset.add_argument("--partitions", metavar="0,3", help="only these partitions")
    reset.add_argument("--execute", action="store_true", help="store the plan")
    reset.add_argument("--force", action="store_true", help="even while members are registered")
    reset.set_defaults(run=lambda args: asyncio.run(_reset(args)))

    consume = commands.add_parser(
        "consume",
        parents=[servers],
        help="join a group and print its records; Ctrl-C commits and leaves",
    )
    consume.add_argument("group")
    consume.add_argument("topic")
    consume.add_argument(
        "--from-beginning",
        action="store_true",
        help="where nothing is stored, start at the earliest record (default: the latest)",
    )
    consume.set_defaults(run=lambda args: asyncio.run(_consume(args)))

    local = commands.add_parser(
        "local", help="a local ZooKeeper + Kafka: up (prints its export lines) or down"
    )
    local.add_argument("action", choices=["up", "down"])
    local.add_argument("--kafka-port", type=int, help="Kafka's port for up (default: a free one)")
    local.add_argument("--zookeeper-port", type=int, help="ZooKeeper's port for up")
    local.set_defaults(run=_local)
    return parser


def _address(given: str | None, variable: str, option: str) -> str:
    address = given or os.environ.get(variable, "").strip()
    if not address:
        raise ConfigurationError(f"no {option[2:]} address: pass {option} or set {variable}")
    return address


@contextlib.asynccontextmanager
async def _zookeeper(args: argparse.Namespace) -> AsyncIterator[ZooKeeper]:
    if not args.timeout > 0:
        raise ConfigurationError(f"--timeout must be positive, not {args.timeout}")
    zk = ZooKeeper(
        _address(args.zookeeper, _ZOOKEEPER_VAR, "--zookeeper"), request_timeout=args.timeout
    )
    await zk.start()
    try:
        yield zk
    finally:
        await zk.close()


def _kafka_options(args: argparse.Namespace) -> KafkaOptions:
    """The validated ``--kafka-option`` and ``--ssl-cafile`` settings; errors never quote a
    secret."""
    return KafkaOptions.from_pairs(args.kafka_option or [], ssl_cafile=args.ssl_cafile)


@contextlib.asynccontextmanager
async def _kafka(args: argparse.Namespace) -> AsyncIterator[OffsetReader]:
    reader = OffsetReader(
        _address(args.bootstrap, _BOOTSTRAP_VAR, "--bootstrap"),
        client_id=_PROG,
        request_timeout_ms=int(args.timeout * 1000),
        options=_kafka_options(args),
    )
    await reader.start()
    try:
        yield reader
    finally:
        await reader.stop()


async def _list(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = []
    async with _zookeeper(args) as zk:
        for group in await survey.list_groups(zk):
            members = await survey.read_members(zk, group)
            topics = await survey.group_topics(zk, group, members.values())
            rows.append({"group": group, "topics": topics, "members": len(members)})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    tables.show(tables.groups_table(rows))
    return 0


async def _describe(args: argparse.Namespace) -> int:
    rows: list[LagRow] = []
    async with _zookeeper(args) as zk, _kafka(args) as kafka:
        await survey.require_group(zk, args.group)
        members = await survey.read_members(zk, args.group)
        topics = (
            [args.topic]
            if args.topic
            else await survey.group_topics(zk, args.group, members.values())
        )
        unreadable: list[str] = []
        for topic in topics:
            layout = GroupLayout(args.group, topic)
            bounds = await kafka.bounds(topic, await kafka.partitions(topic))
            stored = await survey.read_stored(zk, layout)
            owners = await survey.read_owners(zk, layout)
            rows += lag_rows(topic, owners, stored, bounds)
            unreadable += [
                f"{topic}/{p} holds {value.data[:40]!r}"
                for p, value in sorted(stored.items())
                if isinstance(value, Unreadable)
            ]
    if args.json:
        print(json.dumps([row.as_json() for row in rows], indent=2))
        return 0
    tables.show(tables.members_table(args.group, members))
    tables.show(tables.lag_table(rows))
    for note in unreadable:
        tables.show(f"offset node {note}, not an offset: repair it with reset-offsets")
    return 0


async def _reset(args: argparse.Namespace) -> int:
    target = _target(args)
    wanted = None if args.partitions is None else parse_partitions(args.partitions)
    layout = GroupLayout(args.group, args.topic)
    async with _zookeeper(args) as zk, _kafka(args) as kafka:
        await survey.require_group(zk, args.group)
        members = await survey.read_members(zk, args.group)
        active = sorted(
            m for m, info in members.items() if info is None or args.topic in info.topics
        )
        partitions = select_partitions(await kafka.partitions(args.topic), wanted)
        bounds = await kafka.bounds(args.topic, partitions)
        at_time = None
        if isinstance(target, ToTime):
            at_time = await kafka.offsets_for_time(args.topic, partitions, target.timestamp_ms)
        stored = await survey.read_stored(zk, layout)
        plan = plan_reset(target, stored, bounds, at_time)
        tables.show(tables.plan_table(plan))
        if not args.execute:
            tables.show("dry run: nothing changed; add --execute to store this plan")
            if active:
                tables.show(f"note: {len(active)} member(s) registered: --execute needs --force")
            return 0
        if active and not args.force:
            raise ConfigurationError(
                f"refused: group {args.group!r} has {len(active)} member(s) registered for "
                f"{args.topic!r} ({', '.join(active)}); they would overwrite the new offsets. "
                "Stop them first, or pass --force"
            )
        offsets = {row.partition: row.new for row in plan}
        await survey.write_offsets(zk, layout, offsets, existing=stored)
    tables.show(f"stored the new offsets of {len(plan)} partition(s)")
    return 0


def _target(args: argparse.Namespace) -> ResetTarget:
    if args.to_earliest:
        return ToEarliest()
    if args.to_latest:
        return ToLatest()
    if args.to_offset is not None:
        if args.to_offset < 0:
            raise ConfigurationError(f"--to-offset must not be negative, not {args.to_offset}")
        return ToOffset(args.to_offset)
    if args.to_datetime is not None:
        return ToTime(parse_timestamp(args.to_datetime))
    return ShiftBy(args.shift_by)


async def _consume(args: argparse.Namespace) -> int:
    stop = anyio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    group = ConsumerGroup(
        args.group,
        _address(args.bootstrap, _BOOTSTRAP_VAR, "--bootstrap"),
        _address(args.zookeeper, _ZOOKEEPER_VAR, "--zookeeper"),
        args.topic,
        trail=not args.from_beginning,
        request_timeout=args.timeout,
        kafka_options=_kafka_options(args),
        # An operator who names a topic that does not exist wants to hear so, not to wait.
        wait_for_topic=False,
    )
    async with group, anyio.create_task_group() as tasks:

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


def _local(args: argparse.Namespace) -> int:
    from ..local import main as local_main  # noqa: PLC0415 - only this command needs it

    argv = [args.action]
    if args.kafka_port is not None:
        argv += ["--kafka-port", str(args.kafka_port)]
    if args.zookeeper_port is not None:
        argv += ["--zookeeper-port", str(args.zookeeper_port)]
    return local_main(argv)
