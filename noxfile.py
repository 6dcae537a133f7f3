"""Every routine of the project, as a nox session: ``nox -s tests``, ``tests_compat``, ``deps``,
``lint``, ``typecheck``, ``chaos``, ``soak``, ``demo``, ``bench``, ``docs``."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import nox
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

nox.options.sessions = ["lint", "typecheck", "tests"]
nox.options.reuse_existing_virtualenvs = True
# uv makes and fills the virtualenvs in seconds where it is installed (CI installs it); else
# virtualenv and pip, as before.
nox.options.default_venv_backend = "uv|virtualenv"
if hasattr(nox.options, "download_python"):
    nox.options.download_python = "never"  # the claimed versions come from the machine

COMPAT_PYTHONS = ["3.10", "3.12", "3.13"]
"""The claimed versions (pyproject's classifiers) besides the default one, which runs everything."""

TEST_WORKERS = 4
"""pytest-xdist workers of the whole suite. Its tests wait on servers and timeouts far more than
they compute, so more of them than cores (2 on the CI machine) still shortens the run. Five made
CI slower (8 min 27 s, 15 CPU-minutes against 13): a busier machine stretches every wait, and
the checks beside the suite, at their lower priority, ended only after it."""

FAULT_WORKERS = 2
"""pytest-xdist workers of the tests marked ``faults``, which run beside the whole suite: they
wait out faults far more than they compute, on clusters of their own."""

STOP_TIMEOUT = 240
"""Seconds a pytest beside the block has to end once interrupted, its fixtures torn down (its
clusters' JVMs get 15 s each, 90 s one that writes its class archive), before SIGKILL."""

CLUSTER_VARIABLES = ("AIO_CLUSTER_BOOTSTRAP", "AIO_CLUSTER_ZOOKEEPER")
"""Where these name a cluster, the tests use it instead of starting one."""

LONG = "not chaos and not soak"
"""The long runs, each in a session of its own (``chaos``, ``soak``), which no other runs."""

SERVER_FREE = f"(server_free or smoke) and {LONG}"
"""What ``tests_compat`` runs: every test that uses no cluster fixture (tests/conftest.py marks
them), and the few real-server smoke tests (marked ``smoke``)."""

COMPAT_PROFILE = ("--hypothesis-profile", "compat")
"""The property tests' profile on the other Pythons and bounds (tests/conftest.py): they check
that the properties run there, with a tenth of the cases of the whole search (``tests``)."""

PINNED = ("aiokafka", "kazoo")
"""The dependencies whose private names the package uses (its seams, ``aio_cluster/kafka/`` and
``aio_cluster/zookeeper/``): ``deps`` runs the tests on each bound of their pins."""

SEAMS = f"(seams or server_free or smoke) and {LONG}"
"""What ``deps`` runs: the seams' contract tests, and the suite ``tests_compat`` runs (so that
the selection is never empty)."""


def _interpreters_on_path(versions: list[str]) -> None:
    """Make ``pythonX.Y`` of each version findable where pyenv installed it but its shim does not
    run it (pyenv's shims run only the selected versions): a link to it in ``.nox/bin``, put
    first on PATH. ``python3`` and ``python`` stay what they were."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    links = Path(__file__).parent / ".nox" / "bin"
    for version in versions:
        name = f"python{version}"
        try:
            subprocess.run([name, "-c", ""], check=True, capture_output=True)
            continue  # found and runs
        except (OSError, subprocess.CalledProcessError):
            pass
        installed = sorted(
            root.glob(f"{version}.*/bin/{name}"),
            key=lambda path: [int(part) for part in path.parts[-3].split(".") if part.isdigit()],
        )
        if installed:
            links.mkdir(parents=True, exist_ok=True)
            # Made aside and renamed over the link: nox processes running side by side (.ci/run)
            # each make it at once.
            made = links / f".{name}.{os.getpid()}"
            made.unlink(missing_ok=True)
            made.symlink_to(installed[-1])
            made.replace(links / name)
    if links.is_dir():
        os.environ["PATH"] = f"{links}{os.pathsep}{os.environ.get('PATH', '')}"


_interpreters_on_path(COMPAT_PYTHONS)


@nox.session
def tests(session: nox.Session) -> None:
    """The whole test suite against a real local ZooKeeper + Kafka, then the user-style suite in
    ``tests_user/`` through the ``aio_cluster.testing`` plugin.

    The suite runs in `TEST_WORKERS` parallel workers on one cluster the session starts (see
    `_shared_cluster`), the tests of a module on one worker (so that a module's own cluster starts
    once; see tests/conftest.py); beside it, in a pytest of their own, the tests marked
    ``faults`` (on clusters of their own) in `FAULT_WORKERS`; then ``tests_user/`` on the shared
    cluster. With arguments
    (``nox -s tests -- tests/test_x.py -x``) only pytest with those arguments runs. The
    dashboard's browser tests drive the machine's Chromium (``.ci/run`` installs it) through
    Playwright, the ``browser`` extra.
    """
    session.install("-e", ".[test,examples,browser]")
    if session.posargs:
        session.run("pytest", *session.posargs)
        return
    with _shared_cluster(session) as cluster:
        faults = ("-n", str(FAULT_WORKERS), "--dist", "loadgroup", "-m", f"faults and {LONG}")
        with _beside(session, faults, cluster):
            session.run(
                *("pytest", "-n", str(TEST_WORKERS), "--dist", "loadgroup"),
                *("-m", f"not faults and {LONG}"),
                env=cluster,
            )
        session.run("pytest", "-p", "aio_cluster.testing", "tests_user", env=cluster)


@contextlib.contextmanager
def _beside(session: nox.Session, arguments: Sequence[str], env: dict[str, str]) -> Iterator[None]:
    """``pytest ARGUMENTS`` running during the block, its output kept and shown after it; the
    session fails if that pytest did (none selected, exit status 5, is no failure). Should the
    block fail, that pytest is ended (its process group: its workers and their servers)."""
    python = Path(session.bin) / "python"
    output = Path(session.create_tmp()) / "beside.log"
    # The environment session.run gives: the session's virtualenv first on PATH.
    path = f"{session.bin}{os.pathsep}{os.environ.get('PATH', '')}"
    environment = {**os.environ, "PATH": path, "VIRTUAL_ENV": str(Path(session.bin).parent)}
    with output.open("w+b") as log:
        process = subprocess.Popen(
            # No cache: the pytest of the block writes pytest's, at the same time.
            [python, "-m", "pytest", "-p", "no:cacheprovider", *arguments],
            env={**environment, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            yield
            process.wait()
        except BaseException:  # the block failed, or an interrupt came while waiting
            _end(process)
            raise
        finally:
            status = process.wait()
            log.seek(0)
            sys.stdout.write(log.read().decode(errors="replace"))
            sys.stdout.flush()
    if status not in (0, 5):
        session.error(f"pytest {' '.join(arguments)} failed (exit status {status})")


def _end(process: subprocess.Popen[bytes]) -> None:
    """End ``process``'s group as Ctrl-C would (pytest tears its fixtures down, and with them
    its clusters), and SIGKILL it after `STOP_TIMEOUT`."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


@contextlib.contextmanager
def _shared_cluster(session: nox.Session) -> Iterator[dict[str, str]]:
    """A local cluster for the session's test passes (``tests/shared_cluster.py``, in the
    session's Python), named by the two variables it yields; stopped after the block, also when
    a pass fails, and with nox should nox die. Where the variables name a cluster already, that
    one."""
    named = {name: os.environ[name] for name in CLUSTER_VARIABLES if os.environ.get(name)}
    if named:
        yield named
        return
    python = Path(session.bin) / "python"
    with subprocess.Popen(
        [python, "tests/shared_cluster.py"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        try:
            lines = [process.stdout.readline().decode().strip() for _ in CLUSTER_VARIABLES]
            cluster = dict(line.partition("=")[::2] for line in lines)
            if sorted(cluster) != sorted(CLUSTER_VARIABLES):
                session.error(f"the shared test cluster did not start: {lines}")
            session.log(" ".join(lines))
            yield cluster
        finally:
            process.stdin.close()  # the cluster stops, and the process ends


@nox.session(python=COMPAT_PYTHONS)
def tests_compat(session: nox.Session) -> None:
    """The server-free tests and the real-server smoke tests on each other claimed Python
    (``nox -s tests_compat-3.13`` for one); the whole suite runs on the default one (``tests``).
    """
    session.install("-e", ".[test,examples]")
    session.run("pytest", "-m", SERVER_FREE, *COMPAT_PROFILE, *session.posargs)


@nox.session
@nox.parametrize("bound", ["lowest", "highest"], ids=["lowest", "highest"])
def deps(session: nox.Session, bound: str) -> None:
    """The seams' contract tests (marked ``seams``) and the ``tests_compat`` suite against the
    lowest (``nox -s "deps(lowest)"``) or the highest versions that pyproject.toml's pins
    of aiokafka and kazoo allow, on one cluster the session starts (as ``tests`` does). uv
    resolves the bounds from the pins as written, so they follow a raised floor. While both
    bounds resolve to the same versions, both skip (saying so): those are the versions the
    ``tests`` session installs (uv's default resolution is the highest), where the whole suite,
    these tests included, runs; a second and third cluster on the same versions cost CI
    minutes."""
    pins = _resolved_bounds(session, bound)
    other = _resolved_bounds(session, "lowest" if bound == "highest" else "highest")
    if pins == other:
        same = " ".join(pins)
        session.skip(f"the lowest bounds equal the highest ({same}): the tests session runs them")
    session.install("-e", ".[test,examples]", *pins)
    session.log(f"{bound} bounds: {' '.join(pins)}")
    with _shared_cluster(session) as cluster:
        session.run("pytest", "-m", SEAMS, *COMPAT_PROFILE, *session.posargs, env=cluster)


def _resolved_bounds(session: nox.Session, bound: str) -> list[str]:
    """``name==version`` of each of `PINNED` at the ``lowest`` or ``highest`` bound its
    requirement in pyproject.toml allows, as uv resolves them for the session's Python."""
    with open("pyproject.toml", "rb") as file:
        dependencies: list[str] = tomllib.load(file)["project"]["dependencies"]
    wanted = [line for line in dependencies if canonicalize_name(Requirement(line).name) in PINNED]
    if len(wanted) != len(PINNED):
        session.error(f"pyproject.toml does not pin each of {PINNED}: {wanted}")
    requirements = Path(session.create_tmp()) / "pinned.in"
    requirements.write_text("\n".join(wanted) + "\n")
    if shutil.which("uv") is None:
        session.install("uv")
    resolution = "lowest-direct" if bound == "lowest" else "highest"
    output = session.run(
        *("uv", "pip", "compile", "--quiet", "--no-header", "--no-annotate"),
        *("--resolution", resolution, "--python", str(Path(session.bin) / "python")),
        str(requirements),
        external=True,
        silent=True,
    )
    assert isinstance(output, str)
    resolved = [line for line in output.split() if canonicalize_name(line.split("==")[0]) in PINNED]
    if len(resolved) != len(PINNED):
        session.error(f"uv resolved no version of each of {PINNED}: {output}")
    return resolved


@nox.session
def chaos(session: nox.Session) -> None:
    """Random joins, graceful leaves, SIGKILLs and freezes of the oldest past its session of member
    processes: nothing may be lost, and one leader at the end."""
    session.install("-e", ".[test]")
    session.run("pytest", "-m", "chaos", "-rP", *session.posargs)


@nox.session
def soak(session: nox.Session) -> None:
    """Members live for minutes through churn (joins, leaves, kills, freezes, ZooKeeper cuts, Kafka
    cuts) while a producer writes, on a cluster of the test's own; a long-lived member's memory,
    descriptors, tasks and threads, its ZooKeeper watches, ephemerals and connections, and its
    Kafka connections, must not grow, and nothing may be lost (tests/soak/). ``nox -s soak --
    --minutes 2`` for a shorter run (default 15, or ``AIO_CLUSTER_SOAK_MINUTES``); other
    arguments go to pytest."""
    session.install("-e", ".[test]")
    arguments = list(session.posargs)
    env: dict[str, str] = {}
    if "--minutes" in arguments:
        at = arguments.index("--minutes")
        env["AIO_CLUSTER_SOAK_MINUTES"] = arguments[at + 1]
        del arguments[at : at + 2]
    session.run("pytest", "-m", "soak", "-rP", "tests/soak", *arguments, env=env)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff: lint and formatting."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the package and on the tests (``tests/``, ``tests_user/``): the tests
    import the examples' HTTP client and Playwright, hence those extras."""
    session.install("-e", ".[test,examples,local-tls,browser]", "mypy")
    session.run("mypy", "--strict", "aio_cluster", "tests", "tests_user")


@nox.session
def demo(session: nox.Session) -> None:
    """The live demo: a local cluster, a producer and a group of members rebalancing."""
    session.install("-e", ".[examples]")
    session.run("python", "examples/demo.py", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """The benchmarks: throughput against raw aiokafka and the peers' group consumers, join/leave
    time against a Kafka group, settling at scale (partitions moved, ZooKeeper requests), the CPU
    of a ZooKeeper call, one member's memory over 200 partitions, the local cluster's start and
    stop with one and three nodes of each, process() against its ideal and the async for loop,
    what OpenTelemetry costs both, the dashboard's refresh and page at 10,000 partitions, what
    exactly-once pipelines cost against at-least-once ones, what an idle group costs
    ZooKeeper, and the bytes members read across racks."""
    session.install("-e", ".[bench,otel,dashboard,examples]", "opentelemetry-sdk")
    session.run("python", "benchmarks/throughput.py")
    session.run("python", "benchmarks/rebalance.py")
    session.run("python", "benchmarks/scale.py")
    session.run("python", "benchmarks/zookeeper_calls.py")
    session.run("python", "benchmarks/memory.py")
    session.run("python", "benchmarks/startup.py")
    session.run("python", "benchmarks/processing.py")
    session.run("python", "benchmarks/tracing.py")
    session.run("python", "benchmarks/deploy.py")
    session.run("python", "benchmarks/dashboard.py")
    session.run("python", "benchmarks/exactly_once.py")
    session.run("python", "benchmarks/idle.py")
    session.run("python", "benchmarks/racks.py")


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation site, built strictly: any warning fails the build (the API reference
    imports the dashboard, hence that extra)."""
    session.install("-e", ".[docs,dashboard]")
    session.run("mkdocs", "build", "--strict", "--site-dir", "site", *session.posargs)
