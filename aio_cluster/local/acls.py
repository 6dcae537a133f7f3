"""The SCRAM users and ACLs of a SASL cluster, set through Kafka's own command-line tools
(``kafka-configs.sh`` and ``kafka-acls.sh``, run with ``java`` from the kafka-tools jar): aiokafka's
admin client has no calls for them.

The tools connect to a node's plaintext listener between its broker and controller parts, whose
principal (``ANONYMOUS``) is a super user (see `aio_cluster.local.security`), so they need no
credentials. Each call starts a JVM: a second or a few.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TypedDict

from ..errors import ConfigurationError
from . import jars, process
from .class_archive import ClassArchive
from .security import SASL_MECHANISM

CONFIGS = "org.apache.kafka.tools.ConfigCommand"
ACLS = "org.apache.kafka.tools.AclCommand"
_CONFIGS = ("DescribeConfigs", "AlterConfigs")
OPERATIONS: dict[str, frozenset[str]] = {
    "topic": frozenset(
        {"All", "Read", "Write", "Create", "Delete", "Describe", "Alter", *_CONFIGS}
    ),
    "group": frozenset({"All", "Read", "Describe", "Delete"}),
    "transactional_id": frozenset({"All", "Write", "Describe"}),
    "cluster": frozenset(
        {"All", "Create", "ClusterAction", "IdempotentWrite", "Alter", "Describe", *_CONFIGS}
    ),
}
"""The operations an ACL may allow on each kind of resource, as Kafka names them (its tool
refuses the others, printing its whole usage text)."""
_PLAIN = re.compile(r"[A-Za-z0-9._@-]+")
"""What a user name or password may hold here: the tools' own syntax uses ``,[]=`` and spaces."""


def user_arguments(name: str, password: str) -> list[str]:
    """``kafka-configs.sh`` arguments that create (or update) a SCRAM user.

    Raises:
        ConfigurationError: the name or password holds a character outside letters, digits and
            ``._@-`` (the tool's syntax would split it).
    """
    _check_plain("user name", name)
    _check_plain("password", password, shown=False)
    return [
        *("--alter", "--entity-type", "users", "--entity-name", name),
        *("--add-config", f"{SASL_MECHANISM}=[password={password}]"),
    ]


class AclResources(TypedDict, total=False):
    """The resources `LocalCluster.grant()` and `revoke()` name, as keyword arguments.

    Attributes:
        topic: a topic's name (``"*"``: every topic).
        group: a consumer group's name.
        transactional_id: a transactional producer's id.
        cluster: the cluster itself.
        prefixed: the names are prefixes: every resource whose name starts so.
    """

    topic: str | None
    group: str | None
    transactional_id: str | None
    cluster: bool
    prefixed: bool


def acl_arguments(
    user: str,
    operations: Sequence[str],
    *,
    add: bool,
    topic: str | None = None,
    group: str | None = None,
    transactional_id: str | None = None,
    cluster: bool = False,
    prefixed: bool = False,
) -> list[str]:
    """``kafka-acls.sh`` arguments that allow (``add``) or no longer allow ``user`` the
    ``operations`` on each resource named.

    Raises:
        ConfigurationError: no operation or no resource, an operation a resource named does
            not have, or a user name outside letters, digits and ``._@-``.
    """
    _check_plain("user name", user)
    if not operations:
        raise ConfigurationError("name at least one operation, e.g. 'Read'")
    named = {
        "topic": [] if topic is None else ["--topic", topic],
        "group": [] if group is None else ["--group", group],
        "transactional_id": (
            [] if transactional_id is None else ["--transactional-id", transactional_id]
        ),
        "cluster": ["--cluster"] if cluster else [],
    }
    resources = [argument for arguments in named.values() for argument in arguments]
    if not resources:
        raise ConfigurationError(
            "name a resource: topic=, group=, transactional_id= or cluster=True"
        )
    for kind, arguments in named.items():
        missing = sorted(set(operations) - OPERATIONS[kind])
        if arguments and missing:
            raise ConfigurationError(
                f"a {kind.replace('_', ' ')} has no ACL operations {missing}; Kafka's for it "
                f"are {sorted(OPERATIONS[kind])}"
            )
    return [
        *(["--add"] if add else ["--remove", "--force"]),
        *("--allow-principal", f"User:{user}"),
        *(argument for operation in operations for argument in ("--operation", operation)),
        *resources,
        *(["--resource-pattern-type", "prefixed"] if prefixed else []),
    ]


async def run_tool(
    java: str,
    cache_dir: Path,
    log: Path,
    bootstrap: str,
    main: str,
    arguments: Sequence[str],
    deadline: float,
) -> None:
    """Run one of Kafka's tools against ``bootstrap``; its output goes to ``log``.

    Raises:
        LocalClusterError: the tool failed or did not finish by ``deadline`` (the message quotes
            the end of its output), or its jars could not be fetched.
    """
    tools = await jars.resolve_jars(cache_dir, "tools")
    command = process.java_command(
        java, tools, process.TOOL_FLAGS, main, "--bootstrap-server", bootstrap, *arguments
    )
    archive = ClassArchive(java, tools, main)
    tool = process.Child(main.rpartition(".")[2], command, log, archive=archive)
    try:
        await tool.run(deadline)
    finally:
        await tool.stop()


def _check_plain(what: str, value: str, *, shown: bool = True) -> None:
    if not _PLAIN.fullmatch(value):
        quoted = repr(value) if shown else "given"
        raise ConfigurationError(
            f"the {what} {quoted} must be letters, digits and ._@- only (Kafka's tools split "
            "others)"
        )
