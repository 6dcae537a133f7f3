"""Every option of the ``aio-cluster`` command's server subcommands, declared once, and the
subcommands that take each.

An option (`Flag`) is what argparse reads (one argument, or several that make one value, as the
five ``--to-*`` of a reset's target) and the typed value it resolves to, checked; its field names
that value in a subcommand's options (`aio_cluster.cli.options`). A subcommand (`Command`) lists
the options it takes, in the order of its fields and of its ``--help``, with words of its own
where an option means something of its own there (what ``--json`` prints, say).
`aio_cluster.cli.arguments` builds the parser and resolves the options from `COMMANDS`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, cast

from ..assign.strategies import Strategy
from ..errors import ConfigurationError
from ..kafka.fetcher import ISOLATION_LEVELS, IsolationLevel
from ..operator import plans
from ..operator.environment import TOKEN_VAR, env, operator
from ..operator.health import Thresholds, parse_duration
from .options import (
    CheckOptions,
    ConsumeOptions,
    DashboardOptions,
    DescribeOptions,
    ListOptions,
    PauseOptions,
    ResetOptions,
    ServerOptions,
    SkipOptions,
)

__all__ = ["COMMANDS", "Argument", "Command", "Flag"]


@dataclass(frozen=True)
class Argument:
    """One argument as argparse declares it: its flags (a positional's name) and settings."""

    flags: tuple[str, ...]
    settings: Mapping[str, Any]


@dataclass(frozen=True)
class Flag:
    """One option of the subcommands, declared once.

    Attributes:
        field: the name of its value in a subcommand's options.
        arguments: what argparse reads of it; none for a value the command finds itself (who
            writes a control, which of pause and resume runs).
        read: its typed value, from what argparse read.
        one_of: exactly one of its arguments must be given.
    """

    field: str
    arguments: tuple[Argument, ...]
    read: Callable[[argparse.Namespace], Any]
    one_of: bool = False

    def saying(self, *helps: str) -> Flag:
        """The option with a subcommand's own help: one for each of its arguments."""
        arguments = tuple(
            replace(argument, settings={**argument.settings, "help": words})
            for argument, words in zip(self.arguments, helps, strict=True)
        )
        return replace(self, arguments=arguments)


@dataclass(frozen=True)
class Command:
    """A server subcommand: its name, its ``--help`` words, the options it takes (its fields,
    in order) and the pairs of them that exclude each other."""

    name: str
    options: type[ServerOptions]
    summary: str
    description: str | None
    takes: tuple[Flag, ...]
    apart: tuple[tuple[str, str], ...] = ()


def _argument(*flags: str, **settings: Any) -> Argument:
    return Argument(flags, settings)


def _flag(
    field: str, *flags: str, read: Callable[[Any], object] | None = None, **settings: Any
) -> Flag:
    """An option of one argument, whose value is what argparse read (through ``read``)."""
    dest = flags[0].lstrip("-").replace("-", "_")
    convert = read or (lambda value: value)
    return Flag(field, (_argument(*flags, **settings),), lambda args: convert(getattr(args, dest)))


def _duration(field: str, default: str, words: str) -> Flag:
    """An option of a time, ``2s`` or ``500ms``, in seconds."""
    flag = f"--{field}"
    return _flag(
        field,
        flag,
        read=lambda text: parse_duration(text, flag),
        default=default,
        metavar="DURATION",
        help=words,
    )


def _switch(field: str, flag: str, words: str) -> Flag:
    """An option that is on or off."""
    return _flag(field, flag, action="store_true", help=words)


def _not_negative(option: str, value: int) -> int:
    if value < 0:
        raise ConfigurationError(f"{option} must not be negative, not {value}")
    return value


def _number(option: str) -> Callable[[int | None], int | None]:
    """The check of a number that must not be negative, None where it was not given."""
    return lambda value: None if value is None else _not_negative(option, value)


def _named(names: list[str] | None) -> tuple[str, ...]:
    """Repeated names, each once, in the order given."""
    return tuple(dict.fromkeys(names or ()))


def _each_partition(numbers: list[int] | None) -> tuple[int, ...] | None:
    for number in numbers or ():
        _not_negative("--partition", number)
    return None if numbers is None else tuple(sorted(set(numbers)))


def _samples(count: int) -> int:
    if count < 2:
        raise ConfigurationError(f"--samples must be at least 2, not {count}")
    return count


def _thresholds(args: argparse.Namespace) -> Thresholds:
    if args.lag_threshold < 0:
        raise ConfigurationError(f"--lag-threshold must not be negative, not {args.lag_threshold}")
    return Thresholds(args.lag_threshold, args.max_lag)


def _target(args: argparse.Namespace) -> plans.ResetTarget:
    if args.to_earliest:
        return plans.ToEarliest()
    if args.to_latest:
        return plans.ToLatest()
    if args.to_offset is not None:
        return plans.ToOffset(_not_negative("--to-offset", args.to_offset))
    if args.to_datetime is not None:
        return plans.ToTime(plans.parse_timestamp(args.to_datetime))
    return plans.ShiftBy(args.shift_by)


def _port(port: int) -> int:
    if not 0 <= port <= 65535:
        raise ConfigurationError(f"--port must be a port number, not {port}")
    return port


def _token(allow_writes: bool) -> str | None:
    token = env(TOKEN_VAR) if allow_writes else None
    if allow_writes and token is None:
        raise ConfigurationError(
            f"--allow-writes needs a token: set ${TOKEN_VAR} (it is never printed)"
        )
    return token


# --- the options ----------------------------------------------------------------------------------

GROUP = _flag("group", "group")
TOPICS = _flag(
    "topics",
    "--topic",
    read=_named,
    action="append",
    metavar="TOPIC",
    help="only this topic; repeatable (default: every topic of the group's)",
)
JSON = _switch("json", "--json", "print JSON instead of a table")
EXECUTE = _switch("execute", "--execute", "store the plan")
INTERVAL = _duration("interval", "2s", "the time between two looks at the groups (default 2s)")
WINDOW = _duration("window", "30s", "how long to sample, e.g. 30s, 2m (default 30s)")
THRESHOLDS = Flag(
    "thresholds",
    (
        _argument(
            "--lag-threshold",
            type=int,
            default=0,
            metavar="N",
            help="a lag of at most N counts as caught up (default 0)",
        ),
        _argument(
            "--max-lag",
            type=int,
            metavar="N",
            help="a lag above N at the end is lagging however it moved",
        ),
    ),
    _thresholds,
)
TARGET = Flag(
    "target",
    (
        _argument("--to-earliest", action="store_true", help="the earliest retained offset"),
        _argument("--to-latest", action="store_true", help="the log end: skip everything"),
        _argument("--to-offset", type=int, metavar="N", help="offset N"),
        _argument("--to-datetime", metavar="ISO8601", help="the first record at or after it"),
        _argument("--shift-by", type=int, metavar="N", help="N records on (negative: back)"),
    ),
    _target,
    one_of=True,
)
BY = Flag("by", (), lambda _args: operator())
"""Who writes a control: ``user@host`` of the process."""


def _controls(action: str, summary: str, description: str) -> Command:
    """``pause`` or ``resume``: the same options, the ``action`` named."""
    return Command(
        action,
        PauseOptions,
        summary,
        description,
        (
            GROUP,
            TOPICS,
            Flag("action", (), lambda _args: action),
            _flag(
                "partitions",
                "--partition",
                read=_each_partition,
                action="append",
                type=int,
                metavar="P",
                help="only this partition of each topic; repeatable (default: all of them)",
            ),
            JSON.saying(
                f"print the partitions {action}d as a JSON list (topic, partition, by, at)"
            ),
            BY,
        ),
    )


COMMANDS = (
    Command("list", ListOptions, "the groups in ZooKeeper", None, (JSON,)),
    Command(
        "describe",
        DescribeOptions,
        "a group's members, and per partition its lag",
        None,
        (
            GROUP,
            TOPICS,
            _switch(
                "members",
                "--members",
                "only the members (with --json: a JSON list of them, with their names, "
                "subscriptions and partition counts)",
            ),
            JSON.saying("print the partitions as a JSON list instead"),
            _switch("watch", "--watch", "redraw the tables in place until Ctrl-C"),
            INTERVAL.saying("with --watch: the time between two looks (default 2s)"),
        ),
        apart=(("json", "watch"),),
    ),
    Command(
        "check",
        CheckOptions,
        "a health verdict by rules: exit 0 ok, 1 warning, 2 error",
        "Sample the group over a window and judge each partition: rewound (its "
        "offset went back: error), unowned (no owner all along: error, a warning without lag), "
        "stalled (offset never moved while lag stayed above --lag-threshold: error), lagging "
        "(lag grew all along, or ends above --max-lag: warning), else ok. Exit status 0, 1 or "
        "2 for ok, warning or error; 2 also when the group cannot be looked at.",
        (
            GROUP,
            TOPICS,
            WINDOW,
            _flag(
                "samples",
                "--samples",
                read=_samples,
                type=int,
                default=5,
                metavar="N",
                help="looks spread over the window, the first at its start (default 5, at least 2)",
            ),
            THRESHOLDS,
            JSON.saying("print one JSON object per partition instead"),
            _switch("verbose", "--verbose", "say on stderr when each sample is taken"),
        ),
    ),
    Command(
        "reset-offsets",
        ResetOptions,
        "move a group's stored offsets (a plan unless --execute)",
        "Print the plan (topic, partition, old, new); with --execute store it, every "
        "topic in one transaction. Refused while members are registered, unless --force. Also "
        "repairs a corrupted offset node. A group of one topic needs neither --topic nor "
        "--all-topics; a group of several needs one of them.",
        (
            GROUP,
            TOPICS.saying("the topic whose offsets move; repeatable"),
            _switch(
                "all_topics",
                "--all-topics",
                "every topic the group holds offsets or claims of (as describe shows them)",
            ),
            TARGET,
            _flag(
                "partitions",
                "--partitions",
                read=lambda text: None if text is None else tuple(plans.parse_partitions(text)),
                metavar="0,3",
                help="only these partitions (of one --topic)",
            ),
            EXECUTE,
            _switch("force", "--force", "even while members are registered"),
            JSON.saying(
                "print the plan as a JSON list (topic, partition, old, new, stored) instead"
            ),
        ),
        apart=(("topics", "all_topics"),),
    ),
    _controls(
        "pause",
        "pause partitions of a running group: no member hands out their records",
        "Write an operator's pause of the partitions to ZooKeeper, beside the group's "
        "nodes: within a batch every member stops handing out their records (the claims, "
        "stored offsets and fetch positions stay), whichever member owns them now or later, "
        "until resume. Default: every partition of every topic of the group's (as describe "
        "shows them).",
    ),
    _controls(
        "resume",
        "resume paused partitions: the group's members hand out their records again",
        "Remove the operator's pause of the partitions: their owners hand out their records "
        "again within a batch. Default: every paused partition of the group's.",
    ),
    Command(
        "skip",
        SkipOptions,
        "move a running group past a record (a plan unless --execute)",
        "Print the plan: the partition's owner, the record it is stopped on (by "
        'on_failure="stop"), the records skipped. With --execute, write the skip: the owner '
        "applies it at its next batch, fenced by its claim; the skipped records are never "
        "handled (the stopped-on one goes to the dead-letter topic, if one is set) and a "
        "stopped partition goes on.",
        (
            GROUP,
            _flag("topic", "--topic", required=True, help="the partition's topic"),
            _flag(
                "partition",
                "--partition",
                read=_number("--partition"),
                required=True,
                type=int,
                metavar="P",
                help="the partition",
            ),
            _flag(
                "to_offset",
                "--to-offset",
                read=_number("--to-offset"),
                type=int,
                metavar="N",
                help="go on from offset N (forward only; default: just past the record the "
                "partition is stopped on)",
            ),
            EXECUTE.saying("write the skip"),
            JSON.saying(
                "print the plan as a JSON object (owner, stopped, from, to, skipped, requested)"
            ),
            BY,
        ),
    ),
    Command(
        "consume",
        ConsumeOptions,
        "join a group and print its records; Ctrl-C commits and leaves",
        "Join GROUP as a member and print each record (partition, offset, key, "
        "value, tab-separated). The offsets of the printed records are stored in ZooKeeper for "
        "the group, as any member's are: at least every second and when it leaves. Without "
        "--from-beginning, a partition with no stored offset starts at the latest one, and "
        "that is stored, as Kafka's console consumer does with --group.",
        (
            GROUP,
            _flag("topic", "topic"),
            _switch(
                "from_beginning",
                "--from-beginning",
                "where nothing is stored, start at the earliest record (default: the latest)",
            ),
            _flag(
                "strategy",
                "--strategy",
                read=lambda name: None if name is None else Strategy(name),
                choices=[strategy.value for strategy in Strategy],
                help="the assignment strategy (default: that of the group's registered "
                "members, sticky where none is)",
            ),
            _flag(
                "isolation_level",
                "--isolation-level",
                read=lambda level: cast(IsolationLevel, level),
                choices=ISOLATION_LEVELS,
                default="read_uncommitted",
                help="read_committed prints no record of an aborted transaction "
                "(default: read_uncommitted, as Kafka's own consumer)",
            ),
        ),
    ),
    Command(
        "dashboard",
        DashboardOptions,
        "serve a live web dashboard of the groups (needs the dashboard extra)",
        "Serve a web page of the groups: members, partitions, lag over time, "
        "owner changes and check's verdicts, updated live. Read-only unless --allow-writes, "
        f"which lets whoever gives the token in ${TOKEN_VAR} reset offsets, and pause, resume "
        "and skip partitions, from the page.",
        (
            _flag(
                "host",
                "--host",
                default="127.0.0.1",
                help="the address to listen on (default 127.0.0.1)",
            ),
            _flag(
                "port",
                "--port",
                read=_port,
                type=int,
                default=8080,
                help="the port to listen on (default 8080; 0: any)",
            ),
            _flag(
                "groups",
                "--group",
                read=_named,
                action="append",
                metavar="GROUP",
                help="only this group; repeatable (default: every group in ZooKeeper)",
            ),
            INTERVAL,
            _duration("keep", "1h", "how long lag history and owner changes are kept (default 1h)"),
            WINDOW.saying("the window of check's verdicts, e.g. 30s, 2m (default 30s)"),
            THRESHOLDS.saying(
                "as check's: a lag of at most N counts as caught up (default 0)",
                "as check's: a lag above N is lagging",
            ),
            _flag(
                "token",
                "--allow-writes",
                read=_token,
                action="store_true",
                help="allow offset resets, pauses, resumes and skips from the page to whoever "
                f"gives the token in ${TOKEN_VAR} (never on the command line)",
            ),
        ),
    ),
)
"""The server subcommands, in the order ``aio-cluster --help`` lists them (``local`` after)."""
