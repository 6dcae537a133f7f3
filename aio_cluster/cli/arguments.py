"""The ``aio-cluster`` command's arguments: parsed once, then resolved with the environment into
typed values, in one place.

`parse` declares every flag (argparse; a usage error is one line and exit status 2); `resolve`
turns what was parsed, and the ``AIO_CLUSTER_*`` variables, into a `Connection` (the servers and
how to reach them, shared by every subcommand that speaks to them) and one frozen dataclass per
subcommand. A value that argparse cannot judge (a duration, a ZooKeeper credential, a Kafka
option) is checked here too, before any server is asked. ``local`` is a subcommand of the same
parser; the ``aio-cluster-local`` script declares its arguments with the same
`aio_cluster.local.cli.add_local_arguments` (the local layer declares its own arguments; this
top layer may import it, never the other way round).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, NoReturn, cast

from ..assign.strategies import Strategy
from ..config import ZooKeeperSecurity
from ..errors import ConfigurationError
from ..kafka.fetcher import ISOLATION_LEVELS, IsolationLevel
from ..kafka.options import KafkaOptions
from ..local.cli import LocalOptions, add_local_arguments, local_options
from ..zookeeper.security import Acl, ZooKeeperTLS
from .controls import operator
from .health import Thresholds, parse_duration
from .plans import (
    ResetTarget,
    ShiftBy,
    ToEarliest,
    ToLatest,
    ToOffset,
    ToTime,
    parse_partitions,
    parse_timestamp,
)

__all__ = [
    "AUTH_VAR",
    "PROG",
    "CheckOptions",
    "Connection",
    "ConsumeOptions",
    "DashboardOptions",
    "DescribeOptions",
    "Invocation",
    "ListOptions",
    "PauseOptions",
    "ResetOptions",
    "SkipOptions",
    "parse",
    "resolve",
]

PROG = "aio-cluster"
BOOTSTRAP_VAR = "AIO_CLUSTER_BOOTSTRAP"
ZOOKEEPER_VAR = "AIO_CLUSTER_ZOOKEEPER"
AUTH_VAR = "AIO_CLUSTER_ZOOKEEPER_AUTH"
_ACL_VAR = "AIO_CLUSTER_ZOOKEEPER_ACL"
_TLS_VAR = "AIO_CLUSTER_ZOOKEEPER_TLS"
_CAFILE_VAR = "AIO_CLUSTER_ZOOKEEPER_CAFILE"
_CERTFILE_VAR = "AIO_CLUSTER_ZOOKEEPER_CERTFILE"
_KEYFILE_VAR = "AIO_CLUSTER_ZOOKEEPER_KEYFILE"
_KEY_PASSWORD_VAR = "AIO_CLUSTER_ZOOKEEPER_KEYFILE_PASSWORD"
TOKEN_VAR = "AIO_CLUSTER_DASHBOARD_TOKEN"


# --- the typed values -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Connection:
    """The servers of every subcommand but ``local``, and how to reach them.

    Attributes:
        bootstrap: ``--bootstrap`` or ``$AIO_CLUSTER_BOOTSTRAP``; None: neither (an error only
            for a subcommand that speaks to Kafka, see `bootstrap_address`).
        zookeeper: ``--zookeeper`` or ``$AIO_CLUSTER_ZOOKEEPER``; None: neither.
        timeout: ``--timeout``: seconds to wait for a server, positive.
        kafka: ``--kafka-option`` and ``--ssl-cafile``, validated.
        security: the credentials, ACL and TLS of the ZooKeeper session.
    """

    bootstrap: str | None
    zookeeper: str | None
    timeout: float
    kafka: KafkaOptions
    security: ZooKeeperSecurity

    def bootstrap_address(self) -> str:
        """The Kafka servers.

        Raises:
            ConfigurationError: none named.
        """
        return _named(self.bootstrap, BOOTSTRAP_VAR, "--bootstrap")

    def zookeeper_address(self) -> str:
        """The ZooKeeper servers.

        Raises:
            ConfigurationError: none named.
        """
        return _named(self.zookeeper, ZOOKEEPER_VAR, "--zookeeper")


@dataclass(frozen=True, slots=True)
class ListOptions:
    """``list``: ``--json``."""

    json: bool


@dataclass(frozen=True, slots=True)
class DescribeOptions:
    """``describe GROUP``: ``topics`` empty means every topic of the group's; ``interval`` is
    the seconds between two looks of ``--watch``."""

    group: str
    topics: tuple[str, ...]
    members: bool
    json: bool
    watch: bool
    interval: float


@dataclass(frozen=True, slots=True)
class CheckOptions:
    """``check GROUP``: ``samples`` (at least 2) looks spread over ``window`` seconds."""

    group: str
    topics: tuple[str, ...]
    window: float
    samples: int
    thresholds: Thresholds
    json: bool
    verbose: bool


@dataclass(frozen=True, slots=True)
class ResetOptions:
    """``reset-offsets GROUP``: ``partitions`` None means all of them."""

    group: str
    topics: tuple[str, ...]
    all_topics: bool
    target: ResetTarget
    partitions: tuple[int, ...] | None
    execute: bool
    force: bool
    json: bool


@dataclass(frozen=True, slots=True)
class PauseOptions:
    """``pause GROUP`` and ``resume GROUP``: ``topics`` empty means every topic of the group's,
    ``partitions`` None every partition of each; ``by`` is who writes it (``user@host``)."""

    action: Literal["pause", "resume"]
    group: str
    topics: tuple[str, ...]
    partitions: tuple[int, ...] | None
    json: bool
    by: str


@dataclass(frozen=True, slots=True)
class SkipOptions:
    """``skip GROUP``: one partition; ``to_offset`` None means just past the record it is
    stopped on; ``by`` is who writes it (``user@host``)."""

    group: str
    topic: str
    partition: int
    to_offset: int | None
    execute: bool
    json: bool
    by: str


@dataclass(frozen=True, slots=True)
class ConsumeOptions:
    """``consume GROUP TOPIC``: ``strategy`` None means that of the group's members."""

    group: str
    topic: str
    from_beginning: bool
    strategy: Strategy | None
    isolation_level: IsolationLevel


@dataclass(frozen=True, slots=True)
class DashboardOptions:
    """``dashboard``: where to serve, which groups (empty: all), how often to look, how long to
    keep, ``check``'s window and thresholds; ``token`` None means read-only."""

    host: str
    port: int
    groups: tuple[str, ...]
    interval: float
    keep: float
    window: float
    thresholds: Thresholds
    token: str | None = field(repr=False)


ServerOptions = (
    ListOptions
    | DescribeOptions
    | CheckOptions
    | ResetOptions
    | PauseOptions
    | SkipOptions
    | ConsumeOptions
    | DashboardOptions
)


@dataclass(frozen=True, slots=True)
class Invocation:
    """One run of the command: a subcommand's options, and the connection of those that speak
    to the servers (None for ``local``)."""

    options: ServerOptions | LocalOptions
    connection: Connection | None


# --- parsing --------------------------------------------------------------------------------------


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


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The arguments as argparse read them, for `resolve`; a usage error exits with status 2."""
    parser = _parser()
    parser.hides_unrecognized = any(arg.startswith("--kafka-option") for arg in argv)
    return parser.parse_args(argv)


def _parser() -> _Parser:
    servers = _Parser(add_help=False)
    servers.add_argument("--bootstrap", help=f"Kafka servers, host:port (or ${BOOTSTRAP_VAR})")
    servers.add_argument("--zookeeper", help=f"ZooKeeper servers (or ${ZOOKEEPER_VAR})")
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
        f"Credentials never go on the command line: ${AUTH_VAR}=digest:user:password, or a "
        "file of such lines; they are never printed, in errors neither.",
    )
    secured.add_argument(
        "--zookeeper-auth-file",
        metavar="FILE",
        help="a file of ZooKeeper credentials, one scheme:user:password a line "
        f"(or ${AUTH_VAR} holding one)",
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
    parser = _Parser(prog=PROG, description="Look at and repair aio_cluster consumer groups.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    listing = commands.add_parser("list", parents=[servers], help="the groups in ZooKeeper")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")

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

    controls = {
        "pause": (
            "pause partitions of a running group: no member hands out their records",
            "Write an operator's pause of the partitions to ZooKeeper, beside the group's "
            "nodes: within a batch every member stops handing out their records (the claims, "
            "stored offsets and fetch positions stay), whichever member owns them now or later, "
            "until resume. Default: every partition of every topic of the group's (as describe "
            "shows them).",
        ),
        "resume": (
            "resume paused partitions: the group's members hand out their records again",
            "Remove the operator's pause of the partitions: their owners hand out their records "
            "again within a batch. Default: every paused partition of the group's.",
        ),
    }
    for action, (summary, description) in controls.items():
        control = commands.add_parser(
            action, parents=[servers], help=summary, description=description
        )
        control.add_argument("group")
        control.add_argument(
            "--topic",
            action="append",
            metavar="TOPIC",
            help="only this topic; repeatable (default: every topic of the group's)",
        )
        control.add_argument(
            "--partition",
            action="append",
            type=int,
            metavar="P",
            help="only this partition of each topic; repeatable (default: all of them)",
        )
        control.add_argument(
            "--json",
            action="store_true",
            help=f"print the partitions {action}d as a JSON list (topic, partition, by, at)",
        )

    skip = commands.add_parser(
        "skip",
        parents=[servers],
        help="move a running group past a record (a plan unless --execute)",
        description="Print the plan: the partition's owner, the record it is stopped on (by "
        'on_failure="stop"), the records skipped. With --execute, write the skip: the owner '
        "applies it at its next batch, fenced by its claim; the skipped records are never "
        "handled (the stopped-on one goes to the dead-letter topic, if one is set) and a "
        "stopped partition goes on.",
    )
    skip.add_argument("group")
    skip.add_argument("--topic", required=True, help="the partition's topic")
    skip.add_argument("--partition", required=True, type=int, metavar="P", help="the partition")
    skip.add_argument(
        "--to-offset",
        type=int,
        metavar="N",
        help="go on from offset N (forward only; default: just past the record the partition "
        "is stopped on)",
    )
    skip.add_argument("--execute", action="store_true", help="write the skip")
    skip.add_argument(
        "--json",
        action="store_true",
        help="print the plan as a JSON object (owner, stopped, from, to, skipped, requested)",
    )

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

    dashboard = commands.add_parser(
        "dashboard",
        parents=[servers],
        help="serve a live web dashboard of the groups (needs the dashboard extra)",
        description="Serve a web page of the groups: members, partitions, lag over time, "
        "owner changes and check's verdicts, updated live. Read-only unless --allow-writes, "
        f"which lets whoever gives the token in ${TOKEN_VAR} reset offsets, and pause, resume "
        "and skip partitions, from the page.",
    )
    dashboard.add_argument(
        "--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)"
    )
    dashboard.add_argument(
        "--port", type=int, default=8080, help="the port to listen on (default 8080; 0: any)"
    )
    dashboard.add_argument(
        "--group",
        action="append",
        metavar="GROUP",
        help="only this group; repeatable (default: every group in ZooKeeper)",
    )
    dashboard.add_argument(
        "--interval",
        default="2s",
        metavar="DURATION",
        help="the time between two looks at the groups (default 2s)",
    )
    dashboard.add_argument(
        "--keep",
        default="1h",
        metavar="DURATION",
        help="how long lag history and owner changes are kept (default 1h)",
    )
    dashboard.add_argument(
        "--window",
        default="30s",
        metavar="DURATION",
        help="the window of check's verdicts, e.g. 30s, 2m (default 30s)",
    )
    dashboard.add_argument(
        "--lag-threshold",
        type=int,
        default=0,
        metavar="N",
        help="as check's: a lag of at most N counts as caught up (default 0)",
    )
    dashboard.add_argument(
        "--max-lag", type=int, metavar="N", help="as check's: a lag above N is lagging"
    )
    dashboard.add_argument(
        "--allow-writes",
        action="store_true",
        help="allow offset resets, pauses, resumes and skips from the page to whoever gives "
        f"the token in ${TOKEN_VAR} (never on the command line)",
    )

    local = commands.add_parser(
        "local", help="a local ZooKeeper + Kafka: up (prints its export lines) or down"
    )
    add_local_arguments(local)
    return parser


# --- resolving ------------------------------------------------------------------------------------


def resolve(args: argparse.Namespace) -> Invocation:
    """The typed values of what `parse` read, with the environment's settings.

    Raises:
        ConfigurationError: a value argparse let through is not valid (the Kafka options are
            checked first, before anything else).
    """
    if args.command == "local":
        return Invocation(local_options(args), None)
    kafka = KafkaOptions.from_pairs(args.kafka_option or [], ssl_cafile=args.ssl_cafile)
    options = _command_options(args)
    if not args.timeout > 0:
        raise ConfigurationError(f"--timeout must be positive, not {args.timeout}")
    connection = Connection(
        bootstrap=args.bootstrap or _env(BOOTSTRAP_VAR),
        zookeeper=args.zookeeper or _env(ZOOKEEPER_VAR),
        timeout=args.timeout,
        kafka=kafka,
        security=_zookeeper_security(args),
    )
    return Invocation(options, connection)


def _command_options(args: argparse.Namespace) -> ServerOptions:
    topics = tuple(getattr(args, "topic", None) or ())
    if args.command == "list":
        return ListOptions(json=args.json)
    if args.command == "describe":
        return DescribeOptions(
            group=args.group,
            topics=topics,
            members=args.members,
            json=args.json,
            watch=args.watch,
            interval=parse_duration(args.interval, "--interval"),
        )
    if args.command == "check":
        window = parse_duration(args.window, "--window")
        if args.samples < 2:
            raise ConfigurationError(f"--samples must be at least 2, not {args.samples}")
        return CheckOptions(
            group=args.group,
            topics=topics,
            window=window,
            samples=args.samples,
            thresholds=_thresholds(args),
            json=args.json,
            verbose=args.verbose,
        )
    if args.command == "reset-offsets":
        target = _target(args)
        wanted = None if args.partitions is None else tuple(parse_partitions(args.partitions))
        return ResetOptions(
            group=args.group,
            topics=topics,
            all_topics=args.all_topics,
            target=target,
            partitions=wanted,
            execute=args.execute,
            force=args.force,
            json=args.json,
        )
    built_apart = _BUILT_APART.get(args.command)
    if built_apart is not None:
        return built_apart(args)
    assert args.command == "consume", args.command
    return ConsumeOptions(
        group=args.group,
        topic=args.topic,
        from_beginning=args.from_beginning,
        strategy=None if args.strategy is None else Strategy(args.strategy),
        isolation_level=cast(IsolationLevel, args.isolation_level),
    )


def _control_options(args: argparse.Namespace) -> PauseOptions:
    wanted = args.partition
    for partition in wanted or ():
        _not_negative("--partition", partition)
    return PauseOptions(
        action=args.command,
        group=args.group,
        topics=tuple(dict.fromkeys(args.topic or ())),
        partitions=None if wanted is None else tuple(sorted(set(wanted))),
        json=args.json,
        by=operator(),
    )


def _skip_options(args: argparse.Namespace) -> SkipOptions:
    _not_negative("--partition", args.partition)
    if args.to_offset is not None:
        _not_negative("--to-offset", args.to_offset)
    return SkipOptions(
        group=args.group,
        topic=args.topic,
        partition=args.partition,
        to_offset=args.to_offset,
        execute=args.execute,
        json=args.json,
        by=operator(),
    )


def _not_negative(option: str, value: int) -> None:
    if value < 0:
        raise ConfigurationError(f"{option} must not be negative, not {value}")


def _thresholds(args: argparse.Namespace) -> Thresholds:
    """The verdicts' thresholds, as ``check`` and ``dashboard`` take them."""
    if args.lag_threshold < 0:
        raise ConfigurationError(f"--lag-threshold must not be negative, not {args.lag_threshold}")
    return Thresholds(args.lag_threshold, args.max_lag)


def _dashboard_options(args: argparse.Namespace) -> DashboardOptions:
    thresholds = _thresholds(args)
    if not 0 <= args.port <= 65535:
        raise ConfigurationError(f"--port must be a port number, not {args.port}")
    token = _env(TOKEN_VAR) if args.allow_writes else None
    if args.allow_writes and token is None:
        raise ConfigurationError(
            f"--allow-writes needs a token: set ${TOKEN_VAR} (it is never printed)"
        )
    return DashboardOptions(
        host=args.host,
        port=args.port,
        groups=tuple(dict.fromkeys(args.group or ())),
        interval=parse_duration(args.interval, "--interval"),
        keep=parse_duration(args.keep, "--keep"),
        window=parse_duration(args.window, "--window"),
        thresholds=thresholds,
        token=token,
    )


_BUILT_APART: dict[str, Callable[[argparse.Namespace], ServerOptions]] = {
    "pause": _control_options,
    "resume": _control_options,
    "skip": _skip_options,
    "dashboard": _dashboard_options,
}
"""The subcommands whose options are built by a function of their own."""


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


def _named(address: str | None, variable: str, option: str) -> str:
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
        value = _env(AUTH_VAR)
        if value is None:
            return []
        source, entries = f"${AUTH_VAR}", [value]
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
            f"--zookeeper-acl creator needs credentials: set ${AUTH_VAR} or pass "
            "--zookeeper-auth-file"
        )
    tls = _zookeeper_tls(args)
    return ZooKeeperSecurity(auth=auth, acl=cast(Acl, acl), tls=False if tls is None else tls)
