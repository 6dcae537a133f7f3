"""The command's arguments resolved into typed values, with the environment (no servers)."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from aio_cluster import ConfigurationError, Strategy, ZooKeeperSecurity
from aio_cluster.cli.arguments import parse, resolve
from aio_cluster.cli.flags import COMMANDS, Command
from aio_cluster.cli.options import (
    CheckOptions,
    ConsumeOptions,
    DescribeOptions,
    ListOptions,
    PauseOptions,
    ResetOptions,
    SkipOptions,
)
from aio_cluster.local.cli import LocalOptions, add_local_arguments, local_options
from aio_cluster.operator.health import Thresholds
from aio_cluster.operator.plans import ShiftBy, ToOffset


@pytest.fixture(autouse=True)
def no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "AIO_CLUSTER_BOOTSTRAP",
        "AIO_CLUSTER_ZOOKEEPER",
        "AIO_CLUSTER_ZOOKEEPER_AUTH",
        "AIO_CLUSTER_ZOOKEEPER_ACL",
        "AIO_CLUSTER_ZOOKEEPER_TLS",
        "AIO_CLUSTER_ZOOKEEPER_CAFILE",
        "AIO_CLUSTER_ZOOKEEPER_CERTFILE",
        "AIO_CLUSTER_ZOOKEEPER_KEYFILE",
    ):
        monkeypatch.delenv(name, raising=False)


def test_connection_from_flags_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIO_CLUSTER_ZOOKEEPER", " zk:2181 ")
    monkeypatch.setenv("AIO_CLUSTER_ZOOKEEPER_AUTH", "digest:ops:secret")
    invocation = resolve(parse(["list", "--bootstrap", "kafka:9092", "--timeout", "3"]))
    assert invocation.options == ListOptions(json=False)
    connection = invocation.connection
    assert connection is not None
    assert connection.bootstrap_address() == "kafka:9092"
    assert connection.zookeeper_address() == "zk:2181"
    assert connection.timeout == 3.0
    assert connection.security == ZooKeeperSecurity(auth=[("digest", "ops:secret")], acl="creator")


def test_a_missing_address_is_an_error_only_when_asked_for() -> None:
    connection = resolve(parse(["list", "--zookeeper", "zk:2181"])).connection
    assert connection is not None
    with pytest.raises(ConfigurationError, match="pass --bootstrap or set AIO_CLUSTER_BOOTSTRAP"):
        connection.bootstrap_address()


def test_each_subcommand_has_its_typed_options() -> None:
    assert resolve(parse(["describe", "g", "--topic", "t", "--interval", "500ms"])).options == (
        DescribeOptions("g", ("t",), members=False, json=False, watch=False, interval=0.5)
    )
    assert resolve(parse(["check", "g", "--window", "1m", "--max-lag", "9"])).options == (
        CheckOptions("g", (), 60.0, 5, Thresholds(0, 9), json=False, verbose=False)
    )
    reset = resolve(parse(["reset-offsets", "g", "--shift-by", "-2", "--partitions", "0,3"]))
    assert reset.options == ResetOptions(
        "g", (), False, ShiftBy(-2), (0, 3), execute=False, force=False, json=False
    )
    to_offset = resolve(parse(["reset-offsets", "g", "--to-offset", "7"])).options
    assert isinstance(to_offset, ResetOptions)
    assert to_offset.target == ToOffset(7)
    assert resolve(parse(["consume", "g", "t", "--strategy", "range"])).options == (
        ConsumeOptions("g", "t", False, Strategy.RANGE, "read_uncommitted")
    )
    resume = resolve(
        parse(
            ["resume", "g", "--topic", "t", "--topic", "t", "--partition", "3", "--partition", "1"]
        )
    ).options
    assert isinstance(resume, PauseOptions)
    assert (resume.action, resume.topics, resume.partitions) == ("resume", ("t",), (1, 3))
    skip = resolve(parse(["skip", "g", "--topic", "t", "--partition", "2", "--execute"])).options
    assert isinstance(skip, SkipOptions)
    assert skip == SkipOptions("g", "t", 2, None, execute=True, json=False, by=skip.by)
    assert "@" in skip.by


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: command.name)
def test_each_subcommand_takes_the_fields_of_its_options(command: Command) -> None:
    """The table names each field of a subcommand's options once, in their order."""
    fields = [field.name for field in dataclasses.fields(command.options)]
    assert [flag.field for flag in command.takes] == fields


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["check", "g", "--samples", "1"], "--samples must be at least 2"),
        (["describe", "g", "--interval", "soon"], "--interval 'soon' is not a positive duration"),
        (["reset-offsets", "g", "--to-offset", "-1"], "--to-offset must not be negative"),
        (["list", "--timeout", "0"], "--timeout must be positive"),
        (["list", "--zookeeper-acl", "creator"], "--zookeeper-acl creator needs credentials"),
        (["list", "--kafka-option", "nonsense=1"], "nonsense"),
    ],
)
def test_invalid_values_are_refused_before_any_server_is_asked(
    argv: list[str], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        resolve(parse(argv))


def test_local_is_one_set_of_arguments_for_both_commands() -> None:
    invocation = resolve(parse(["local", "up", "--kafka-port", "9092"]))
    assert invocation.options == LocalOptions("up", 9092, None)
    assert invocation.connection is None
    script = argparse.ArgumentParser(prog="aio-cluster-local")
    add_local_arguments(script)
    assert local_options(script.parse_args(["up", "--kafka-port", "9092"])) == invocation.options
