"""Every routine of the project, as a nox session: ``nox -s tests``, ``lint``, ``typecheck``,
``demo``, ``bench``."""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "typecheck", "tests"]
nox.options.reuse_existing_virtualenvs = True


@nox.session
def tests(session: nox.Session) -> None:
    """The whole test suite against a real local ZooKeeper + Kafka (started by the tests)."""
    session.install("-e", ".[test]")
    session.run("pytest", *session.posargs)


@nox.session
def chaos(session: nox.Session) -> None:
    """Random joins, graceful leaves and SIGKILLs of member processes: nothing may be lost."""
    session.install("-e", ".[test]")
    session.run("pytest", "-m", "chaos", "-rP", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff: lint and formatting."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the package."""
    session.install("-e", ".", "mypy")
    session.run("mypy", "--strict", "aio_cluster")


@nox.session
def demo(session: nox.Session) -> None:
    """The live demo: a local cluster, a producer and a group of members rebalancing."""
    session.install("-e", ".")
    session.run("python", "examples/demo.py", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """The benchmarks: throughput against raw aiokafka and the peers' group consumers, join/leave
    time against a Kafka group, and settling at scale (partitions moved, ZooKeeper requests)."""
    session.install("-e", ".[bench]")
    session.run("python", "benchmarks/throughput.py")
    session.run("python", "benchmarks/rebalance.py")
    session.run("python", "benchmarks/scale.py")
