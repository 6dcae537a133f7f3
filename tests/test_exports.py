"""The public surface is exactly what ``__all__`` lists; the package docstring maps its files."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import aio_cluster
from aio_cluster import AioClusterError, errors


def test_all_is_sorted_and_complete() -> None:
    public = {name for name in dir(aio_cluster) if not name.startswith("_")}
    modules = {name for name in public if inspect.ismodule(getattr(aio_cluster, name))}
    assert sorted(aio_cluster.__all__) == aio_cluster.__all__
    assert set(aio_cluster.__all__) == public - modules


def test_every_error_derives_from_the_root() -> None:
    errors = [
        obj
        for name in aio_cluster.__all__
        if inspect.isclass(obj := getattr(aio_cluster, name)) and issubclass(obj, BaseException)
    ]
    assert len(errors) > 5
    assert all(issubclass(error, AioClusterError) for error in errors)


def test_every_error_the_package_defines_is_in_the_documented_tree() -> None:
    """Every exception class of the package lives in errors.py, is exported there, and has its
    line in the tree its docstring draws."""
    modules = [
        importlib.import_module(info.name)
        for info in pkgutil.walk_packages(aio_cluster.__path__, "aio_cluster.")
        if not info.name.endswith("__main__")
    ]
    defined = {
        obj
        for module in modules
        for obj in vars(module).values()
        if inspect.isclass(obj)
        and issubclass(obj, BaseException)
        and obj.__module__.startswith("aio_cluster")
        and not obj.__name__.startswith("_")  # private signals that never leave their module
    }
    assert {error.__module__ for error in defined} == {"aio_cluster.errors"}
    assert {error.__name__ for error in defined} == set(errors.__all__)
    tree = re.findall(r"^ *[│ ]*[├└]── (\w+)", errors.__doc__ or "", flags=re.MULTILINE)
    assert sorted(["AioClusterError", *tree]) == sorted(errors.__all__)


PACKAGE = Path(aio_cluster.__file__).parent

# Which of the package's parts each part may import: nothing low imports anything high, and the
# two server packages never import each other.
LAYERS: dict[str, set[str]] = {
    "net": {"errors", "net"},
    "assign": {"errors", "assign"},
    "zookeeper": {"errors", "net", "assign", "zookeeper"},
    "kafka": {"errors", "net", "kafka"},
    "config": {"errors", "net", "assign", "zookeeper", "kafka", "config"},
    "control": {"errors", "net", "assign", "zookeeper", "control"},
    "otel": {"errors", "kafka", "otel"},
    "member": {
        *("errors", "net", "assign", "zookeeper", "kafka", "config", "otel", "control"),
        "member",
    },
    "group": {"errors", "net", "assign", "zookeeper", "kafka", "config", "otel", "member"},
    "local": {"errors", "net", "zookeeper", "kafka", "local"},
    "testing": {"errors", "local"},
    "metrics": {"errors", "group", "member"},
    # Beside the command at the top: it reads what the command reads (cli's looks, survey,
    # health and plans); only the command's ``dashboard`` subcommand imports it, lazily.
    "dashboard": {
        *("errors", "net", "assign", "zookeeper", "kafka", "config", "member", "cli"),
        *("control", "dashboard"),
    },
    "errors": set(),
}
# Pure modules: computing, never waiting on a server.
PURE = [
    "config.py",
    "assign/strategies.py",
    "assign/subscription.py",
    "assign/shares.py",
    "assign/target.py",
    "zookeeper/layout.py",
    "control/model.py",
    "cli/plans.py",
    "cli/health.py",
    "member/delivery/claims.py",
    "member/delivery/partitions.py",
    "kafka/topics.py",
    "member/protocol/keyed_layout.py",
    "member/naming.py",
    "member/processing/windows.py",
    "otel/attributes.py",
    "dashboard/charts.py",
    "dashboard/history.py",
    "dashboard/pages.py",
    "dashboard/views.py",
]
IO = {"aiokafka", "kazoo", "asyncio", "anyio", "socket", "ssl", "subprocess"}


def _packages() -> list[Path]:
    return [PACKAGE, *(path.parent for path in PACKAGE.glob("*/__init__.py"))]


@pytest.mark.parametrize("package", _packages(), ids=lambda path: path.name)
def test_each_module_map_matches_its_package(package: Path) -> None:
    """Each package docstring maps every module and subpackage of it, and nothing else."""
    init = package / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    mapped = re.findall(r"^ {4}(\S+\.py|\S+/) {2,}\S", doc, flags=re.MULTILINE)
    present = [path.name for path in package.glob("*.py") if path.name != "__init__.py"]
    present += [f"{path.name}/" for path in package.iterdir() if (path / "__init__.py").is_file()]
    assert sorted(mapped) == sorted(present)
    assert mapped == sorted(mapped), "the map is in alphabetical order"


def _imports(path: Path) -> set[str]:
    """The absolute names a module imports (relative imports resolved within the package)."""
    module = path.relative_to(PACKAGE.parent).with_suffix("").parts
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = module[: len(module) - node.level] if node.level else ()
            name = ".".join([*base, *([node.module] if node.module else [])])
            found.add(name)
            found |= {f"{name}.{alias.name}" for alias in node.names}
    return found


def _part(name: str) -> str | None:
    parts = name.split(".")
    if parts[0] != "aio_cluster" or len(parts) < 2:
        return None
    return parts[1]


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_no_module_imports_above_its_layer(path: Path) -> None:
    part = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
    allowed = LAYERS.get(part)
    if allowed is None:  # the top: __init__, __main__, cli
        return
    reached = {p for name in _imports(path) if (p := _part(name)) is not None and p in LAYERS}
    reached |= {p for name in _imports(path) if (p := _part(name)) in ("cli", "__main__")}
    assert reached <= allowed, f"{path.name} imports {sorted(reached - allowed)}"


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_do_no_io(module: str) -> None:
    roots = {name.split(".")[0] for name in _imports(PACKAGE / module)}
    assert not roots & IO
