"""The ``aio-cluster`` command (also ``python -m aio_cluster``): look at groups and repair them.

::

    aio-cluster list [--json]
    aio-cluster describe GROUP [--topic T ...] [--members] [--json | --watch]
    aio-cluster check GROUP [--topic T ...] [--window 30s] [--json]
    aio-cluster reset-offsets GROUP (--topic T ... | --all-topics) --to-earliest [--partitions 0,3]
        [--execute] [--json]
    aio-cluster consume GROUP TOPIC [--from-beginning] [--strategy S]
    aio-cluster consume GROUP TOPIC --isolation-level read_committed
    aio-cluster local up|down

The servers come from ``--bootstrap`` / ``--zookeeper`` or ``AIO_CLUSTER_BOOTSTRAP`` /
``AIO_CLUSTER_ZOOKEEPER``; a secured ZooKeeper's credentials from ``AIO_CLUSTER_ZOOKEEPER_AUTH``
or ``--zookeeper-auth-file`` (never from the command line, never printed), its TLS settings from
``--zookeeper-cafile`` and friends. A failure is one line on stderr and exit status 1 (2 for bad
arguments; ``check`` exits 2 when it cannot look), never a traceback. ZooKeeper is read and
written in `aio_cluster.cli.survey`, Kafka in `aio_cluster.kafka`; what is shown, planned or
judged is computed in `aio_cluster.cli.plans` and `aio_cluster.cli.health` and drawn in
`aio_cluster.cli.tables`.
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
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, NoReturn, TypeVar, cast

import anyio
from rich.console import Group as Stack
from rich.live import Live
from rich.text import Text

from ..assign.strategies import Strategy
from ..config import ZooKeeperSecurity
from ..errors import AccessDeniedError, AioClusterError, ConfigurationError, CoordinationError
from ..group import ConsumerGroup
from ..kafka.fetcher import ISOLATION_LEVELS
from ..kafka.offset_reader import OffsetReader
from ..kafka.options import KafkaOptions
from ..kafka.topics import TopicPartition
from ..zookeeper.client import ZooKeeper
from ..zookeeper.layout import GroupLayout, Registration, group_path
from ..zookeeper.security import Acl, ZooKeeperTLS
from . import survey, tables
from .health import PartitionHealth, Sample, Thresholds, judge, parse_duration, verdict
from .plans import (
    LagRow,
    PlanRow,
    ResetTarget,
    ShiftBy,
    ToEarliest,
    ToLatest,
    ToOffset,
    ToTime,
    Unreadable,
    lag_rows,
    may_read,
    member_host,
    member_json,
    parse_partitions,
    parse_timestamp,
    plan_reset,
    reset_topics,
    select_partitions,
)

__all__ = ["main"]

T = TypeVar("T")

_PROG = "aio-cluster"
_BOOTSTRAP_VAR = "AIO_CLUSTER_BOOTSTRAP"
_ZOOKEEPER_VAR = "AIO_CLUSTER_ZOOKEEPER"
_AUTH_VAR = "AIO_CLUSTER_ZOOKEEPER_AUTH"
_ACL_VAR = "AIO_CLUSTER_ZOOKEEPER_ACL"
_TLS_VAR = "AIO_CLUSTER_ZOOKEEPER_TLS"
_CAFILE_VAR = "AIO_CLUSTER_ZOOKEEPER_CAFILE"
_CERTFILE_VAR = "AIO_CLUSTER_ZOOKEEPER_CERTFILE"
_KEYFILE_VAR = "AIO_CLUSTER_ZOOKEEPER_KEYFILE"
_KEY_PASSWORD_VAR = "AIO_CLUSTER_ZOOKEEPER_KEYFILE_PASSWORD"


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
    # A health check that cannot look is as bad as a failing group: it must page.
    failed = 2 if args.command == "check" else 1
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
    return failed


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
    secured = servers.add_argument_group(
        "secured ZooKeeper",
        f"Credentials never go on the command line: ${_AUTH_VAR}=digest:user:password, or a "
        "file of such lines; they are never printed, in errors neither.",
    )
    secured.add_argument(
        "--zookeeper-auth-file",
        metavar="FILE",
        help="a file of ZooKeeper credentials, one scheme:user:password a line "
        f"(or ${_AUTH_VAR} holding one)",
    )
    secured.add_argument(
        "--zookeeper-acl",
        choices=["open", "creator"],
        help="the ACL of the nodes the command creates (default: creator with credentials, "
        f"else open; or ${_ACL_VAR})",
    )
    secured.add_argument(
        "--zookeeper-tls",
        action="store_true",
        help=f"speak TLS to ZooKeeper (or ${_TLS_VAR}=1); implied by --zookeeper-cafile",
    )
    secured.add_argument(
        "--zookeeper-cafile",
        help=f"a PEM file of the CAs to trust for ZooKeeper (or ${_CAFILE_VAR})",
    )
    secured.add_argument(
        "--zookeeper-certfile",
        help=f"this client's certificate for ZooKeeper, PEM (or ${_CERTFILE_VAR})",
    )
    secured.add_argument(
        "--zookeeper-keyfile",
        help=f"the key of --zookeeper-certfile, PEM (or ${_KEYFILE_VAR}; its password in "
        f"${_KEY_PASSWORD_VAR})",
    )
    parser = _Parser(prog=_PROG, description="Look at and repair aio_cluster consumer groups.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    listing = commands.add_parser("list", parents=[servers], help="the groups in ZooKeeper")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    listing.set_defaults(run=lambda args: asyncio.run(_list(args)))

    describe = commands.add_parser(
        "describe", parents=[servers], help="a group's members, and per partition its lag"
    )
    describe.add_argument("group")
    describe.add_argument(
        "--topic",
        action="append",
        metavar="TOPIC",
        help="only this topic; repeatable (default: every topic of the group's)",
    )
    describe.add_argument(
        "--members",
        action="store_true",
        help="only the members (with --json: a JSON list of them, with their names, "
        "subscriptions and partition counts)",
    )
    shown = describe.add_mutually_exclusive_group()
    shown.add_argument(
        "--json", action="store_true", help="print the partitions as a JSON list instead"
    )
    shown.add_argument(
        "--watch", action="store_true", help="redraw the tables in place until Ctrl-C"
    )
    describe.add_argument(
        "--interval",
        default="2s",
        metavar="DURATION",
        help="with --watch: the time between two looks (default 2s)",
    )
    describe.set_defaults(run=lambda args: asyncio.run(_describe(args)))

    check = commands.add_parser(
        "check",
        parents=[servers],
        help="a health verdict by rules: exit 0 ok, 1 warning, 2 error",
        description="Sample the group over a window and judge each partition: rewound (its "
        "offset went back: error), unowned (no owner all along: error, a warning without lag), "
        "stalled (offset never moved while lag stayed above --lag-threshold: error), lagging "
        "(lag grew all along, or ends above --max-lag: warning), else ok. Exit status 0, 1 or "
        "2 for ok, warning or error; 2 also when the group cannot be looked at.",
    )
    check.add_argument("group")
    check.add_argument(
        "--topic",
        action="append",
        metavar="TOPIC",
        help="only this topic; repeatable (default: every topic of the group's)",
    )
    check.add_argument(
        "--window",
        default="30s",
        metavar="DURATION",
        help="how long to sample, e.g. 30s, 2m (default 30s)",
    )
    check.add_argument(
        "--samples",
        type=int,
        default=5,
        metavar="N",
        help="looks spread over the window, the first at its start (default 5, at least 2)",
    )
    check.add_argument(
        "--lag-threshold",
        type=int,
        default=0,
        metavar="N",
        help="a lag of at most N counts as caught up (default 0)",
    )
    check.add_argument(
        "--max-lag",
        type=int,
        metavar="N",
        help="a lag above N at the end is lagging however it moved",
    )
    check.add_argument(
        "--json", action="store_true", help="print one JSON object per partition instead"
    )
    check.add_argument(
        "--verbose", action="store_true", help="say on stderr when each sample is taken"
    )
    check.set_defaults(run=lambda args: asyncio.run(_check(args)))

    reset = commands.add_parser(
        "reset-offsets",
        parents=[servers],
        help="move a group's stored offsets (a plan unless --execute)",
        description="Print the plan (topic, partition, old, new); with --execute store it, every "
        "topic in one transaction. Refused while members are registered, unless --force. Also "
        "repairs a corrupted offset node. A group of one topic needs neither --topic nor "
        "--all-topics; a group of several needs one of them.",
    )
    reset.add_argument("group")
    scope = reset.add_mutually_exclusive_group()
    scope.add_argument(
        "--topic",
        action="append",
        metavar="TOPIC",
        help="the topic whose offsets move; repeatable",
    )
    scope.add_argument(
        "--all-topics",
        action="store_true",
        help="every topic the group holds offsets or claims of (as describe shows them)",
    )
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the earliest retained offset")
    to.add_argument("--to-latest", action="store_true", help="the log end: skip everything")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N")
    to.add_argument("--to-datetime", metavar="ISO8601", help="the first record at or after it")
    to.add_argument("--shift-by", type=int, metavar="N", help="N records on (negative: back)")
    reset.add_argument("--partitions", metavar="0,3", help="only these partitions (of one --topic)")
    reset.add_argument("--execute", action="store_true", help="store the plan")
    reset.add_argument("--force", action="store_true", help="even while members are registered")
    reset.add_argument(
        "--json",
        action="store_true",
        help="print the plan as a JSON list (topic, partition, old, new, stored) instead",
    )
    reset.set_defaults(run=lambda args: asyncio.run(_reset(args)))

    consume = commands.add_parser(
        "consume",
        parents=[servers],
        help="join a group and print its records; Ctrl-C commits and leaves",
        description="Join GROUP as a member and print each record (partition, offset, key, "
        "value, tab-separated). The offsets of the printed records are stored in ZooKeeper for "
        "the group, as any member's are: at least every second and when it leaves. Without "
        "--from-beginning, a partition with no stored offset starts at the latest one, and "
        "that is stored, as Kafka's console consumer does with --group.",
    )
    consume.add_argument("group")
    consume.add_argument("topic")
    consume.add_argument(
        "--from-beginning",
        action="store_true",
        help="where nothing is stored, start at the earliest record (default: the latest)",
    )
    consume.add_argument(
        "--strategy",
        choices=[strategy.value for strategy in Strategy],
        help="the assignment strategy (default: that of the group's registered members, "
        "sticky where none is)",
    )
    consume.add_argument(
        "--isolation-level",
        choices=ISOLATION_LEVELS,
        default="read_uncommitted",
        help="read_committed prints no record of an aborted transaction "
        "(default: read_uncommitted, as Kafka's own consumer)",
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


def _env(variable: str) -> str | None:
    return os.environ.get(variable, "").strip() or None


def _zookeeper_auth(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The credentials of ``--zookeeper-auth-file`` or ``$AIO_CLUSTER_ZOOKEEPER_AUTH``; an error
    names where a malformed one came from, never what it holds."""
    if args.zookeeper_auth_file is not None:
        source = f"--zookeeper-auth-file {args.zookeeper_auth_file}"
        try:
            with open(args.zookeeper_auth_file, encoding="utf-8") as file:
                lines = [line.strip() for line in file]
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise ConfigurationError(f"cannot read {source}: {reason}") from None
        entries = [line for line in lines if line and not line.startswith("#")]
        if not entries:
            raise ConfigurationError(f"{source} holds no credentials")
    else:
        value = _env(_AUTH_VAR)
        if value is None:
            return []
        source, entries = f"${_AUTH_VAR}", [value]
    auth = []
    for number, entry in enumerate(entries, 1):
        scheme, _sep, credential = entry.partition(":")
        user, sep, _password = credential.partition(":")
        if not (scheme and user and sep):
            where = source if len(entries) == 1 else f"{source} (credential {number})"
            raise ConfigurationError(f"{where} is not of the form digest:user:password")
        auth.append((scheme, credential))
    return auth


def _zookeeper_tls(args: argparse.Namespace) -> ZooKeeperTLS | None:
    ca = args.zookeeper_cafile or _env(_CAFILE_VAR)
    certfile = args.zookeeper_certfile or _env(_CERTFILE_VAR)
    keyfile = args.zookeeper_keyfile or _env(_KEYFILE_VAR)
    wanted = args.zookeeper_tls or (_env(_TLS_VAR) or "0").lower() in ("1", "true", "yes")
    if not (wanted or ca or certfile or keyfile):
        return None
    for option, path in (
        ("--zookeeper-cafile", ca),
        ("--zookeeper-certfile", certfile),
        ("--zookeeper-keyfile", keyfile),
    ):
        if path is not None and not os.path.isfile(path):
            raise ConfigurationError(f"{option} {path}: no such file")
    return ZooKeeperTLS(
        ca=ca, certfile=certfile, keyfile=keyfile, keyfile_password=_env(_KEY_PASSWORD_VAR)
    )


def _zookeeper_security(args: argparse.Namespace) -> ZooKeeperSecurity:
    """The credentials, ACL and TLS of the command's ZooKeeper session."""
    auth = _zookeeper_auth(args)
    acl = args.zookeeper_acl or _env(_ACL_VAR) or ("creator" if auth else "open")
    if acl not in ("open", "creator"):
        raise ConfigurationError(f"${_ACL_VAR}={acl!r}; use open or creator")
    if acl == "creator" and not auth:
        raise ConfigurationError(
            f"--zookeeper-acl creator needs credentials: set ${_AUTH_VAR} or pass "
            "--zookeeper-auth-file"
        )
    tls = _zookeeper_tls(args)
    return ZooKeeperSecurity(auth=auth, acl=cast(Acl, acl), tls=False if tls is None else tls)


@contextlib.asynccontextmanager
async def _zookeeper(args: argparse.Namespace) -> AsyncIterator[ZooKeeper]:
    if not args.timeout > 0:
        raise ConfigurationError(f"--timeout must be positive, not {args.timeout}")
    security = _zookeeper_security(args)
    zk = ZooKeeper(
        _address(args.zookeeper, _ZOOKEEPER_VAR, "--zookeeper"),
        request_timeout=args.timeout,
        auth=security.auth,
        acl=security.acl,
        tls=security.tls,
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


Look = tuple[dict[str, Registration | None], list[LagRow], list[str]]
"""One look at a group: its members, a row per partition, and notes on what is not shown."""


async def _look(
    zk: ZooKeeper, kafka: OffsetReader, group: str, topics: Sequence[str] | None
) -> Look:
    """One look at a group: the named topics, else every topic it holds. A topic named that
    Kafka does not have is an error; one only found in ZooKeeper (deleted since, say) is a
    note, so that the others are still shown."""
    members = await survey.read_members(zk, group)
    shown = (
        list(dict.fromkeys(topics))
        if topics
        else await survey.group_topics(zk, group, members.values())
    )
    rows: list[LagRow] = []
    notes: list[str] = []
    for name in shown:
        layout = GroupLayout(group, name)
        try:
            partitions = await kafka.partitions(name)
        except ConfigurationError:
            if topics:
                raise
            notes.append(
                f"topic {name} does not exist in Kafka: the group's nodes of it are not shown"
            )
            continue
        bounds = _by_partition(await kafka.bounds({name: partitions}))
        stored = await survey.read_stored(zk, layout)
        owners = await survey.read_owners(zk, layout)
        rows += lag_rows(name, owners, stored, bounds)
        notes += [
            f"offset node {name}/{p} holds {value.data[:40]!r}, not an offset: repair it with "
            "reset-offsets"
            for p, value in sorted(stored.items())
            if isinstance(value, Unreadable)
        ]
    return members, rows, notes


def _by_partition(found: Mapping[TopicPartition, T]) -> dict[int, T]:
    """One topic's answer of the offset reader, by partition id."""
    return {tp.partition: value for tp, value in found.items()}


def _stop_on_signals() -> anyio.Event:
    """An event set by SIGINT or SIGTERM (instead of KeyboardInterrupt)."""
    stop = anyio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def _describe(args: argparse.Namespace) -> int:
    interval = parse_duration(args.interval, "--interval")
    async with _zookeeper(args) as zk, _kafka(args) as kafka:
        await survey.require_group(zk, args.group)
        look = await _look(zk, kafka, args.group, args.topic)
        if args.watch:
            await _watch(zk, kafka, args, interval, look)
            return 0
    members, rows, _notes = look
    if args.json and args.members:
        owned = _owned(rows)
        print(
            json.dumps(
                [
                    member_json(m, member_host(args.group, m), info, owned[m])
                    for m, info in sorted(members.items())
                ],
                indent=2,
            )
        )
        return 0
    if args.json:
        print(json.dumps([row.as_json() for row in rows], indent=2))
        return 0
    tables.show(_describe_view(args.group, look, members_only=args.members))
    return 0


def _owned(rows: Sequence[LagRow]) -> Counter[str]:
    """member id -> how many of the rows' partitions it owns."""
    return Counter(row.owner for row in rows if row.owner is not None)


def _describe_view(group: str, look: Look, *, members_only: bool = False) -> Stack:
    members, rows, notes = look
    shown = tables.members_table(group, members, _owned(rows))
    if members_only:
        return Stack(shown)
    return Stack(shown, tables.lag_table(rows), *(Text(note) for note in notes))


async def _watch(
    zk: ZooKeeper,
    kafka: OffsetReader,
    args: argparse.Namespace,
    interval: float,
    first: Look,
) -> None:
    """Redraw ``describe`` in place every ``interval`` seconds until SIGINT or SIGTERM."""
    stop = _stop_on_signals()
    with Live(
        _describe_view(args.group, first, members_only=args.members),
        console=tables.console(),
        auto_refresh=False,
    ) as live:
        live.refresh()
        while True:
            with anyio.move_on_after(interval):
                await stop.wait()
            if stop.is_set():
                return
            look = await _look(zk, kafka, args.group, args.topic)
            live.update(_describe_view(args.group, look, members_only=args.members))
            live.refresh()


async def _check(args: argparse.Namespace) -> int:
    window = parse_duration(args.window, "--window")
    if args.samples < 2:
        raise ConfigurationError(f"--samples must be at least 2, not {args.samples}")
    if args.lag_threshold < 0:
        raise ConfigurationError(f"--lag-threshold must not be negative, not {args.lag_threshold}")
    thresholds = Thresholds(args.lag_threshold, args.max_lag)
    samples: dict[tuple[str, int], list[Sample]] = {}
    async with _zookeeper(args) as zk, _kafka(args) as kafka:
        await survey.require_group(zk, args.group)
        loop = asyncio.get_running_loop()
        start = loop.time()
        for number in range(args.samples):
            # Evenly over the window: the first look at its start, the last at its end.
            await asyncio.sleep(max(start + window * number / (args.samples - 1) - loop.time(), 0))
            _members, rows, _unreadable = await _look(zk, kafka, args.group, args.topic)
            for row in rows:
                samples.setdefault((row.topic, row.partition), []).append(
                    Sample(row.owner, row.committed, row.lag)
                )
            if args.verbose:
                print(f"{_PROG}: sample {number + 1} of {args.samples} taken", file=sys.stderr)
    findings = [
        judge(topic, partition, seen, thresholds)
        for (topic, partition), seen in sorted(samples.items())
        if len(seen) >= 2  # a partition created during the window is judged next time
    ]
    worst = verdict(findings)
    if args.json:
        print(json.dumps([finding.as_json() for finding in findings], indent=2))
    else:
        tables.show(tables.health_table(findings))
        tables.show(_verdict_line(args.group, findings, window))
    return int(worst)


def _verdict_line(group: str, findings: list[PartitionHealth], window: float) -> str:
    worst = verdict(findings)
    bad = [f for f in findings if f.severity > 0]
    if not bad:
        return (
            f"{worst.name.lower()}: group {group}, {len(findings)} partition(s) over {window:g} s"
        )
    named = ", ".join(f"{f.topic}/{f.partition} {f.status.value}" for f in bad)
    return f"{worst.name.lower()}: group {group}: {named}"


_RESET_ATTEMPTS = 3
"""Plans a reset makes before it refuses, when members keep storing offsets meanwhile."""


async def _refusable(path: str, write: Awaitable[T]) -> T:
    """``write``, with ZooKeeper's ACL refusal said in the command's words."""
    try:
        return await write
    except AccessDeniedError:
        raise AccessDeniedError(
            f"refused by ZooKeeper: the ACL of {path} does not let this session "
            f"change it; pass the group's credentials (${_AUTH_VAR} or --zookeeper-auth-file)"
        ) from None


async def _reset(args: argparse.Namespace) -> int:
    """Plan a reset and, with ``--execute``, store it, every topic in one transaction. The write
    bumps every partition's claim fence, so a member that claimed before it (even between the
    plan and the write) can never store the offset it held; when an offset changed between the
    plan and the write, the plan is made again from what is stored now (refused after
    `_RESET_ATTEMPTS`)."""
    target = _target(args)
    wanted = None if args.partitions is None else parse_partitions(args.partitions)
    async with _zookeeper(args) as zk, _kafka(args) as kafka:
        await survey.require_group(zk, args.group)
        members = await survey.read_members(zk, args.group)
        held = await survey.group_topics(zk, args.group, members.values())
        topics = reset_topics(args.group, args.topic, args.all_topics, held)
        if wanted is not None and len(topics) != 1:
            raise ConfigurationError(
                f"--partitions needs one topic (partitions are numbered per topic), not "
                f"{len(topics)}: {', '.join(topics)}"
            )
        layouts = {topic: GroupLayout(args.group, topic) for topic in topics}
        # With --all-topics, a topic deleted from Kafka keeps its nodes; it has no bounds to
        # plan within, so it is left as it is (and said so), not a reason to reset nothing.
        missing: list[str] = []
        if args.all_topics:
            for topic in topics:
                try:
                    await kafka.partitions(topic)
                except ConfigurationError:
                    missing.append(topic)
            for topic in missing:
                print(
                    f"{_PROG}: topic {topic} does not exist in Kafka: its offsets are left "
                    "as they are",
                    file=sys.stderr,
                )
            topics = [topic for topic in topics if topic not in missing]
            if not topics:
                raise ConfigurationError(
                    f"none of the topics of group {args.group!r} exists in Kafka: nothing to reset"
                )
        where = layouts[topics[0]].offsets if len(topics) == 1 else group_path(args.group)
        for attempt in range(1, _RESET_ATTEMPTS + 1):
            members = await survey.read_members(zk, args.group)
            plans: dict[str, list[PlanRow]] = {}
            versions: dict[str, dict[int, int]] = {}
            for topic in topics:
                plans[topic], versions[topic] = await _plan_topic(
                    zk, kafka, layouts[topic], target, wanted, execute=args.execute
                )
            active = {
                topic: sorted(m for m, info in members.items() if may_read(info, topic))
                for topic in topics
            }
            registered = sorted({m for ids in active.values() for m in ids})
            if not args.json:
                tables.show(tables.plan_table(plans))
            if not args.execute:
                if args.json:
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
            if registered and not args.force:
                named = ", ".join(
                    f"{len(ids)} member(s) registered for {topic!r} ({', '.join(ids)})"
                    for topic, ids in active.items()
                    if ids
                )
                raise ConfigurationError(
                    f"refused: group {args.group!r} has {named}; they would overwrite the new "
                    "offsets. Stop them first, or pass --force"
                )
            writes = {
                layouts[topic]: ({row.partition: row.new for row in plan}, versions[topic])
                for topic, plan in plans.items()
            }
            if await _refusable(where, survey.write_offsets(zk, writes)):
                break
            if attempt < _RESET_ATTEMPTS:
                print(
                    f"{_PROG}: the stored offsets changed meanwhile: planning again",
                    file=sys.stderr,
                )
        else:
            raise CoordinationError(
                f"refused: the stored offsets of group {args.group!r} kept changing while the "
                f"reset was planned ({_RESET_ATTEMPTS} plans); stop its members first"
            )
    if args.json:
        stored = [row.as_json(topic, stored=True) for topic, plan in plans.items() for row in plan]
        print(json.dumps(stored, indent=2))
    else:
        count = sum(len(plan) for plan in plans.values())
        tables.show(f"stored the new offsets of {count} partition(s) of {len(plans)} topic(s)")
    return 0


async def _plan_topic(
    zk: ZooKeeper,
    kafka: OffsetReader,
    layout: GroupLayout,
    target: ResetTarget,
    wanted: Sequence[int] | None,
    *,
    execute: bool,
) -> tuple[list[PlanRow], dict[int, int]]:
    """One topic's plan, and the versions of the offset nodes it was made from. Before an
    ``execute`` every fence exists, so that the write bumps it whatever claims come meanwhile."""
    topic = layout.topic
    partitions = select_partitions(await kafka.partitions(topic), wanted)
    if execute:
        await _refusable(layout.offsets, survey.ensure_fences(zk, layout, partitions))
    bounds = _by_partition(await kafka.bounds({topic: partitions}))
    at_time = None
    if isinstance(target, ToTime):
        at_time = _by_partition(
            await kafka.offsets_for_time({topic: partitions}, target.timestamp_ms)
        )
    nodes = await survey.read_offset_nodes(zk, layout)
    stored = {p: value for p, (value, _version) in nodes.items()}
    return (
        plan_reset(target, stored, bounds, at_time),
        {p: version for p, (_value, version) in nodes.items()},
    )


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
    stop = _stop_on_signals()
    strategy = args.strategy or await _group_strategy(args)
    security = _zookeeper_security(args)
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
        strategy=strategy,
        zookeeper_security=security,
        register=False,
        isolation_level=args.isolation_level,
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
            f"refused by ZooKeeper: {exc}; pass the group's credentials (${_AUTH_VAR} or "
            "--zookeeper-auth-file)"
        ) from None
    finally:
        group_log.setLevel(level)


async def _group_strategy(args: argparse.Namespace) -> Strategy:
    """The strategy of the group's registered members, so that joining is never refused for
    a mismatch; sticky, the library's default, where none is registered."""
    async with _zookeeper(args) as zk:
        members = await survey.read_members(zk, args.group)
    for info in members.values():
        if info is not None and info.subscribes(args.topic) and isinstance(info.strategy, Strategy):
            return info.strategy
    return Strategy.STICKY


def _local(args: argparse.Namespace) -> int:
    from ..local import main as local_main  # noqa: PLC0415 - only this command needs it

    argv = [args.action]
    if args.kafka_port is not None:
        argv += ["--kafka-port", str(args.kafka_port)]
    if args.zookeeper_port is not None:
        argv += ["--zookeeper-port", str(args.zookeeper_port)]
    return local_main(argv)
