"""The public surface is exactly what ``__all__`` lists; each package docstring maps its files;
imports run one way, between the layers and between member/'s parts, in no circle; and a public
class name is defined once."""

from __future__ import annotations

import ast
import graphlib
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import aio_cluster
from aio_cluster import AioClusterError, errors

from support import parsed


def test_all_is_sorted_and_complete() -> None:
    public = {name for name in dir(aio_cluster) if not name.startswith("_")}
    modules = {name for name in public if inspect.ismodule(getattr(aio_cluster, name))}
    assert sorted(aio_cluster.__all__) == aio_cluster.__all__
    assert set(aio_cluster.__all__) == public - modules


def test_the_local_clusters_surface_is_its_all() -> None:
    """``aio_cluster.local`` (the cluster, its fault proxies) exports what ``__all__`` lists."""
    local = importlib.import_module("aio_cluster.local")
    public = {name for name in dir(local) if not name.startswith("_")}
    modules = {name for name in public if inspect.ismodule(getattr(local, name))}
    assert sorted(local.__all__) == local.__all__
    assert set(local.__all__) == public - modules
    assert {"FaultProxy", "KafkaProxies", "LocalCluster"} <= set(local.__all__)


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

# Which of the package's parts each part may import: nothing low imports anything high, the two
# server packages never import each other, and neither do the two front ends (the command line and
# the dashboard) that stand on the operator's tools: ``__main__`` above them joins them.
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
    # The operator's tools (looks, plans, health rules, control writes) on one member's layer.
    "operator": {
        *("errors", "net", "assign", "zookeeper", "kafka", "config", "otel", "control"),
        *("member", "operator"),
    },
    # The two front ends, side by side on the operator's tools.
    "cli": {
        *("errors", "net", "assign", "zookeeper", "kafka", "config", "otel", "control"),
        *("member", "operator", "group", "local", "cli"),
    },
    "dashboard": {
        *("errors", "net", "assign", "zookeeper", "kafka", "config", "control", "member"),
        *("operator", "dashboard"),
    },
    "errors": set(),
    "concurrency": set(),
}
# The one way to wait and cancel (concurrency.py, which imports nothing of the package): every
# part runs its concurrent calls through it.
for _allowed in LAYERS.values():
    _allowed.add("concurrency")
# Inside member/: three machines, each a subpackage, and the modules above them that join them
# (member.py, controls.py, ...: "member" here); the group protocol and the processing engine
# stand side by side on the delivery, and neither imports the other.
MEMBER_LAYERS: dict[str, set[str]] = {
    "delivery": {"delivery"},
    "protocol": {"delivery", "protocol"},
    "processing": {"delivery", "processing"},
    "member": {"delivery", "protocol", "processing", "member"},
}
# Pure modules: computing, never waiting on a server.
PURE = [
    "config.py",
    "assign/strategies.py",
    "assign/subscription.py",
    "assign/shares.py",
    "assign/target.py",
    "assign/racks.py",
    "kafka/placement.py",
    "zookeeper/layout.py",
    "zookeeper/values.py",
    "control/model.py",
    "member/delivery/announcements.py",
    "operator/controls.py",
    "operator/health.py",
    "operator/plans.py",
    "member/delivery/claims.py",
    "member/delivery/commits.py",
    "member/delivery/feed.py",
    "member/delivery/partitions.py",
    "kafka/budget.py",
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
    return sorted(path.parent for path in PACKAGE.rglob("__init__.py"))


@pytest.mark.parametrize(
    "package", _packages(), ids=lambda path: str(path.relative_to(PACKAGE.parent))
)
def test_each_module_map_matches_its_package(package: Path) -> None:
    """Each package docstring maps every module and subpackage of it, and nothing else."""
    init = package / "__init__.py"
    doc = ast.get_docstring(parsed(init.read_text())) or ""
    mapped = re.findall(r"^ {4}(\S+\.py|\S+/) {2,}\S", doc, flags=re.MULTILINE)
    present = [path.name for path in package.glob("*.py") if path.name != "__init__.py"]
    present += [f"{path.name}/" for path in package.iterdir() if (path / "__init__.py").is_file()]
    assert sorted(mapped) == sorted(present)
    assert mapped == sorted(mapped), "the map is in alphabetical order"


def _imported(path: Path) -> list[tuple[str, str | None]]:
    """What a module imports, as (module, name) pairs: ``import x`` is (x, None), ``from x
    import y`` is (x, y); relative imports are resolved within the package."""
    module = path.relative_to(PACKAGE.parent).with_suffix("").parts
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(parsed(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = module[: len(module) - node.level] if node.level else ()
            name = ".".join([*base, *([node.module] if node.module else [])])
            found += [(name, alias.name) for alias in node.names]
    return found


def _imports(path: Path) -> set[str]:
    """The absolute names a module imports (relative imports resolved within the package)."""
    return {name for pair in _imported(path) for name in (pair[0], ".".join(filter(None, pair)))}


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
    if allowed is None:  # the top: __init__, __main__
        return
    reached = {p for name in _imports(path) if (p := _part(name)) is not None and p in LAYERS}
    reached |= {"__main__" for name in _imports(path) if _part(name) == "__main__"}
    assert reached <= allowed, f"{path.name} imports {sorted(reached - allowed)}"


def test_layers_run_one_way() -> None:
    """The parts' table is an order: no two parts may import each other, through others
    neither; the command line and the dashboard stand side by side, neither reaching the other."""
    graph = {part: allowed - {part} for part, allowed in LAYERS.items()}
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        pytest.fail(f"parts that may reach each other: {' -> '.join(reversed(exc.args[1]))}")
    assert "dashboard" not in LAYERS["cli"]
    assert "cli" not in LAYERS["dashboard"]


def _member_part(name: str) -> str | None:
    """Which part of member/ a module belongs to (see `MEMBER_LAYERS`), None outside it."""
    parts = name.split(".")
    if parts[:2] != ["aio_cluster", "member"]:
        return None
    return parts[2] if len(parts) > 2 and parts[2] in MEMBER_LAYERS else "member"


def test_member_layers_run_one_way() -> None:
    """No two parts of member/ may import each other: the table is an order."""
    for part, allowed in MEMBER_LAYERS.items():
        for other in allowed - {part}:
            assert part not in MEMBER_LAYERS[other], f"{part} and {other} may import each other"


@pytest.mark.parametrize(
    "path",
    sorted((PACKAGE / "member").rglob("*.py")),
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_no_member_module_imports_above_its_part(path: Path) -> None:
    """member/'s subpackages import only those below them (``if TYPE_CHECKING:`` imports too)."""
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    part = _member_part(module.removesuffix(".__init__"))
    assert part is not None
    allowed = MEMBER_LAYERS[part]
    reached = {p for name in _imports(path) if (p := _member_part(name)) is not None}
    assert reached <= allowed, f"{path.name} imports member/'s {sorted(reached - allowed)}"


def _modules() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its own)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def test_no_import_circle() -> None:
    """No module of the package reaches itself through the modules it imports, counting the
    imports made only for type checking (``if TYPE_CHECKING:``) and those inside functions."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        # ``from .delivery import finished`` imports the module finished (its package's face
        # only as Python's import machinery does, which is no arrow of the design)
        reached = {
            f"{source}.{name}" if f"{source}.{name}" in modules else source
            for source, name in _imported(path)
        }
        graph[module] = (reached & modules.keys()) - {module}
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        pytest.fail(f"an import circle: {' -> '.join(reversed(exc.args[1]))}")


def _type_names(path: Path) -> list[str]:
    """The public classes a module defines, at any depth, and its public type aliases (a
    capitalized module-level name bound to a type: ``Mode = Literal[...]``)."""
    tree = parsed(path.read_text())
    names = [node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(
            node.value, (ast.Subscript, ast.BinOp, ast.Name, ast.Attribute)
        ):
            names += [
                target.id
                for target in node.targets
                if isinstance(target, ast.Name)
                and target.id[:1].isupper()
                and not target.id.isupper()
            ]
    return [name for name in names if not name.startswith("_")]


def test_each_public_class_name_is_defined_once() -> None:
    """A class name means one class in the whole package, so that a reader (and a search)
    never lands on its namesake: the machine's side gets a name of its own."""
    defined: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for name in _type_names(path):
            defined.setdefault(name, []).append(str(path.relative_to(PACKAGE)))
    assert {name: where for name, where in defined.items() if len(where) > 1} == {}


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_do_no_io(module: str) -> None:
    roots = {name.split(".")[0] for name in _imports(PACKAGE / module)}
    assert not roots & IO
