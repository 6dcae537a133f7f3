"""The documentation is what the library does: every row of ``docs/bad-input.md``'s "When a
member is made" table, tried; every Python snippet of the README and of ``docs/`` compiled,
checked for undefined names and run up to its event loop (the local cluster's against the
session's cluster); the configuration page's defaults compared with the configuration objects'."""

from __future__ import annotations

import ast
import asyncio
import builtins
import dataclasses
import enum
import inspect
import os
import re
import symtable
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

import aio_cluster
from aio_cluster import ConsumerGroup
from aio_cluster.local import LocalCluster

from support import parsed

PAGE = Path(__file__).parents[1] / "docs" / "bad-input.md"
BASE: dict[str, Any] = {
    "name": "my-group",
    "brokers": "127.0.0.1:9092",
    "zookeepers": "127.0.0.1:2181",
    "topic": "my-topic",
}


def constructor_rows() -> list[tuple[str, str, str]]:
    text = PAGE.read_text()
    section = text.split("## When a member is made", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| `(\w+)` \| `([^`]+)` \|$", section, re.MULTILINE)
    assert len(rows) >= 15, "the table was not found"
    return rows


@pytest.mark.parametrize(("changed", "error", "message"), constructor_rows())
def test_each_row_of_the_bad_input_table(changed: str, error: str, message: str) -> None:
    name, _, value = changed.partition("=")
    arguments = {**BASE, name: ast.literal_eval(value)}
    with pytest.raises(getattr(aio_cluster, error)) as raised:
        ConsumerGroup(**arguments)
    assert str(raised.value) == message


# --- Every Python snippet of the README and the documentation runs as written. -----------------

ROOT = Path(__file__).parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def python_snippets() -> list[Any]:
    """Every fenced ``python`` block, with its page and line as the test id."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 2
            where = f"{page.relative_to(ROOT)}:{line}"
            found.append(pytest.param(match.group(1), where, id=where))
    assert len(found) >= 10, "the snippets were not found"
    return found


SNIPPETS = python_snippets()


def undefined_names(source: str, where: str) -> set[str]:
    """The names a snippet reads that it neither imports nor defines, nor are built in."""
    top = symtable.symtable(source, where, "exec")
    defined = {
        symbol.get_name()
        for symbol in top.get_symbols()
        if symbol.is_assigned() or symbol.is_imported() or symbol.is_namespace()
    }
    known = defined | set(dir(builtins))
    missing: set[str] = set()
    tables = [top]
    while tables:
        table = tables.pop()
        tables.extend(table.get_children())
        for symbol in table.get_symbols():
            name = symbol.get_name()
            global_read = symbol.is_global() or table is top
            if symbol.is_referenced() and global_read and name not in known:
                missing.add(name)
    return missing


@pytest.mark.parametrize(("source", "where"), SNIPPETS)
def test_each_python_snippet_is_a_module(source: str, where: str) -> None:
    """A snippet compiles as a file would: no ``await``, ``async with`` or ``async for``
    outside a coroutine."""
    compile(source, where, "exec", dont_inherit=True)


@pytest.mark.parametrize(("source", "where"), SNIPPETS)
def test_each_python_snippet_defines_or_imports_every_name_it_uses(source: str, where: str) -> None:
    assert undefined_names(source, where) == set()


def _starts_a_loop(statement: ast.stmt) -> bool:
    """``asyncio.run(...)`` or ``anyio.run(...)`` at the top: what needs the servers."""
    return (
        isinstance(statement, ast.Expr)
        and isinstance(call := statement.value, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "run"
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id in {"asyncio", "anyio"}
    )


@pytest.mark.parametrize(("source", "where"), SNIPPETS)
def test_each_python_snippet_runs_up_to_its_event_loop(source: str, where: str) -> None:
    """Every statement but the final ``asyncio.run(main())`` runs without servers: the imports
    resolve, the classes and functions are made, a member is configured (which connects to
    nothing)."""
    module = parsed(source, where)
    module.body = [statement for statement in module.body if not _starts_a_loop(statement)]
    exec(compile(module, where, "exec"), {"__name__": "snippet"})


def test_the_front_page_links_every_page() -> None:
    """``docs/index.md`` is where a reader of the site starts: it links every other page of
    ``docs/``, so that a page added is a page found."""
    front = (ROOT / "docs" / "index.md").read_text()
    linked = set(re.findall(r"\]\(([\w.-]+\.md)(?:#[\w-]*)?\)", front))
    pages = {page.name for page in (ROOT / "docs").glob("*.md")} - {"index.md"}
    missing = sorted(pages - linked)
    assert not missing, f"docs/index.md links none of {missing}"


def _snippet_with(text: str) -> str:
    matching = [source for source, *_ in (param.values for param in SNIPPETS) if text in source]
    assert matching, f"no snippet contains {text!r}"
    return str(matching[0])


def test_the_security_snippet_configures_a_member(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The snippet's options are built for real (the SSL context from a CA file, the SASL
    options, the ZooKeeper TLS); the member it makes is recorded rather than made, since a member
    made but never joined keeps an unclosed Kafka client (joining a secured cluster is
    ``test_security_sasl.py``'s)."""
    trustme = pytest.importorskip("trustme")
    ca_file = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(ca_file))
    monkeypatch.setenv("ORDERS_KAFKA_PASSWORD", "kafka-secret")
    monkeypatch.setenv("ORDERS_ZOOKEEPER_PASSWORD", "zookeeper-secret")
    made: list[inspect.BoundArguments] = []

    def record(*args: Any, **kwargs: Any) -> None:
        made.append(inspect.signature(ConsumerGroup).bind(*args, **kwargs))

    namespace: dict[str, Any] = {}
    exec(_snippet_with("def orders_member("), namespace)
    namespace["ConsumerGroup"] = record
    namespace["orders_member"]("127.0.0.1:9093", "127.0.0.1:2182", str(ca_file))

    (arguments,) = made
    options = arguments.arguments["kafka_options"]
    assert isinstance(options, aio_cluster.KafkaOptions)
    assert options["sasl_plain_password"] == "kafka-secret"
    assert "kafka-secret" not in repr(options)
    security = arguments.arguments["zookeeper_security"]
    assert security.auth == (("digest", "orders:zookeeper-secret"),)
    assert security.acl == "creator"
    assert security.tls == aio_cluster.ZooKeeperTLS(ca=str(ca_file))


CONFIGURATION = {
    kind.__name__: kind
    for kind in (
        aio_cluster.Timing,
        aio_cluster.Fetching,
        aio_cluster.Membership,
        aio_cluster.ZooKeeperSecurity,
        aio_cluster.Processing,
    )
}


def _shown(call: ast.Call) -> dict[str, Any]:
    """A call's keyword arguments, a configuration object's as the keywords of its call."""
    return {
        keyword.arg: _shown(keyword.value)
        if isinstance(keyword.value, ast.Call)
        else ast.literal_eval(keyword.value)
        for keyword in call.keywords
        if keyword.arg is not None
    }


def _plain(value: object) -> object:
    return value.value if isinstance(value, enum.Enum) else value


def test_the_configuration_snippets_spell_out_the_real_defaults() -> None:
    """The configuration page's snippets show every option of every configuration object (and
    every keyword-only argument of ConsumerGroup) with the default the code has."""
    source = (ROOT / "docs" / "configuration.md").read_text()
    calls = [
        (node.func.id, node)
        for match in FENCE.finditer(source)
        for node in ast.walk(parsed(match.group(1)))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    ]
    for name, kind in CONFIGURATION.items():
        defaults = {field.name: _plain(field.default) for field in dataclasses.fields(kind)}
        shown = [_shown(call) for called, call in calls if called == name]
        assert defaults in shown, f"{name}(...) with every field at its default"
    member = next(c for called, c in calls if called == "ConsumerGroup" and len(c.keywords) > 3)
    parameters = inspect.signature(ConsumerGroup).parameters
    keyword_only = {
        name: parameter.default
        for name, parameter in parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    }
    given = {keyword.arg: keyword.value for keyword in member.keywords if keyword.arg is not None}
    assert set(given) == set(keyword_only), "every keyword-only argument, and only those"
    for name, value in given.items():
        if not isinstance(value, ast.Call):
            assert ast.literal_eval(value) == keyword_only[name], name


@pytest.mark.smoke
@pytest.mark.asyncio
async def test_the_local_cluster_snippet_prints_the_sessions_cluster(
    cluster: LocalCluster,
) -> None:
    """Run as written (in a process of its own, as a user would), it finds the session's cluster
    through the two variables instead of starting one, and prints its addresses."""
    environment = {
        **os.environ,
        "AIO_CLUSTER_BOOTSTRAP": cluster.bootstrap,
        "AIO_CLUSTER_ZOOKEEPER": cluster.zookeeper,
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _snippet_with("async with LocalCluster() as cluster"),
        env=environment,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    with anyio.fail_after(60):
        out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    assert out.decode() == f"{cluster.bootstrap} {cluster.zookeeper}\n"
