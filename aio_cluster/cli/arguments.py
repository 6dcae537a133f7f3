"""The ``aio-cluster`` command's arguments: parsed once, then resolved with the environment into
typed values, in one place.

`parse` declares every flag (argparse; a usage error is one line and exit status 2): those of
the servers, shared by every subcommand that speaks to them, here; each subcommand's own from
the table of `aio_cluster.cli.flags`, where each option is declared once. `resolve` turns what
was parsed, and the ``AIO_CLUSTER_*`` variables, into a `Connection` (the servers and how to
reach them, `aio_cluster.operator.connection`) and the subcommand's options
(`aio_cluster.cli.options`). A value that argparse cannot judge (a duration, a ZooKeeper
credential, a Kafka option) is checked here too, before any server is asked. ``local`` is a
subcommand of the same parser; the ``aio-cluster-local`` script declares its arguments with the
same `aio_cluster.local.cli.add_local_arguments` (the local layer declares its own arguments;
this top layer may import it, never the other way round).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import fields
from typing import NoReturn

from ..kafka.options import KafkaOptions
from ..local.cli import add_local_arguments, local_options
from ..operator import environment
from ..operator.connection import ZooKeeperFlags, resolve_connection
from .flags import COMMANDS, Command
from .options import Invocation, ServerOptions

__all__ = ["parse", "resolve"]


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
    servers.add_argument(
        "--bootstrap", help=f"Kafka servers, host:port (or ${environment.BOOTSTRAP_VAR})"
    )
    servers.add_argument("--zookeeper", help=f"ZooKeeper servers (or ${environment.ZOOKEEPER_VAR})")
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
        f"Credentials never go on the command line: ${environment.AUTH_VAR}=digest:user:password, "
        "or a file of such lines; they are never printed, in errors neither.",
    )
    secured.add_argument(
        "--zookeeper-auth-file",
        metavar="FILE",
        help="a file of ZooKeeper credentials, one scheme:user:password a line "
        f"(or ${environment.AUTH_VAR} holding one)",
    )
    secured.add_argument(
        "--zookeeper-acl",
        choices=["open", "creator"],
        help="the ACL of the nodes the command creates (default: creator with credentials, "
        f"else open; or ${environment.ACL_VAR})",
    )
    secured.add_argument(
        "--zookeeper-tls",
        action="store_true",
        help=f"speak TLS to ZooKeeper (or ${environment.TLS_VAR}=1); implied by --zookeeper-cafile",
    )
    secured.add_argument(
        "--zookeeper-cafile",
        help=f"a PEM file of the CAs to trust for ZooKeeper (or ${environment.CAFILE_VAR})",
    )
    secured.add_argument(
        "--zookeeper-certfile",
        help=f"this client's certificate for ZooKeeper, PEM (or ${environment.CERTFILE_VAR})",
    )
    secured.add_argument(
        "--zookeeper-keyfile",
        help="the key of --zookeeper-certfile, PEM (or "
        f"${environment.KEYFILE_VAR}; its password in ${environment.KEY_PASSWORD_VAR})",
    )
    parser = _Parser(
        prog=environment.PROG, description="Look at and repair aio_cluster consumer groups."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        _add(
            commands.add_parser(
                command.name,
                parents=[servers],
                help=command.summary,
                description=command.description,
            ),
            command,
        )
    local = commands.add_parser(
        "local", help="a local ZooKeeper + Kafka: up (prints its export lines) or down"
    )
    add_local_arguments(local)
    return parser


def _add(parser: argparse.ArgumentParser, command: Command) -> None:
    """Declare the subcommand's options, in order; those of a pair ``apart`` exclude each
    other, and so do the arguments of an option that takes one of several."""
    groups = [(pair, parser.add_mutually_exclusive_group()) for pair in command.apart]
    apart = {field: group for pair, group in groups for field in pair}
    for flag in command.takes:
        where = apart.get(flag.field, parser)
        if flag.one_of:
            where = parser.add_mutually_exclusive_group(required=True)
        for argument in flag.arguments:
            where.add_argument(*argument.flags, **argument.settings)


def resolve(args: argparse.Namespace) -> Invocation:
    """The typed values of what `parse` read, with the environment's settings.

    Raises:
        ConfigurationError: a value argparse let through is not valid (the Kafka options are
            checked first, before anything else).
    """
    if args.command == "local":
        return Invocation(local_options(args), None)
    kafka = KafkaOptions.from_pairs(args.kafka_option or [], ssl_cafile=args.ssl_cafile)
    options = _options(args)
    flags = ZooKeeperFlags(  # each --zookeeper-NAME is its field NAME
        **{field.name: getattr(args, f"zookeeper_{field.name}") for field in fields(ZooKeeperFlags)}
    )
    connection = resolve_connection(args.bootstrap, args.zookeeper, args.timeout, kafka, flags)
    return Invocation(options, connection)


def _options(args: argparse.Namespace) -> ServerOptions:
    """The subcommand's options: each option's value, read and checked in the order the
    subcommand takes them."""
    command = next(command for command in COMMANDS if command.name == args.command)
    return command.options(**{flag.field: flag.read(args) for flag in command.takes})
