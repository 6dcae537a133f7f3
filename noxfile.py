"""Every routine of the project, as a nox session: ``nox -s tests``, ``lint``, ``typecheck``,
``demo``, ``bench``, ``docs``."""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "typecheck", "tests"]
nox.options.reuse_existing_virtualenvs = True


@nox.session
def tests(session: nox.Session) -> None:
    """The whole test suite against a real local ZooKeeper + Kafka (started by the tests), then
    the user-style suite in ``tests_user/`` through the ``aio_cluster.testing`` plugin.

    With arguments (``nox -s tests -- tests/test_x.py -x``) only pytest with those arguments runs.
    """
    session.install("-e", ".[test,examples]")
    session.run("pytest", *session.posargs)
    if not session.posargs:
        session.run("pytest", "-p", "aio_cluster.testing", "tests_user")


@nox.session
def chaos(session: nox.Session) -> None:
    """Random joins, graceful leaves, SIGKILLs and freezes of the oldest past its session of member
    processes: nothing may be lost, and one leader at the end."""
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
    session.install("-e", ".[test,local-tls]", "mypy")
    session.run("mypy", "--strict", "aio_cluster")


@nox.session
def demo(session: nox.Session) -> None:
    """The live demo: a local cluster, a producer and a group of members rebalancing."""
    session.install("-e", ".[examples]")
    session.run("python", "examples/demo.py", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """The benchmarks: throughput against raw aiokafka and the peers' group consumers, join/leave
    time against a Kafka group, settling at scale (partitions moved, ZooKeeper requests), and the
    local cluster's start and stop with one and three nodes of each."""
    session.install("-e", ".[bench]")
    session.run("python", "benchmarks/throughput.py")
    session.run("python", "benchmarks/rebalance.py")
    session.run("python", "benchmarks/scale.py")
    session.run("python", "benchmarks/startup.py")


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation site, built strictly: any warning fails the build."""
    session.install("-e", ".[docs]")
    session.run("mkdocs", "build", "--strict", "--site-dir", "site", *session.posargs)
