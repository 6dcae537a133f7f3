"""The public surface is exactly what ``__all__`` lists; the package docstring maps its files."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import aio_cluster
from aio_cluster import AioClusterError


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


def test_the_module_map_matches_the_package() -> None:
    """The package docstring's module map names every module and subpackage, and nothing else."""
    package = Path(aio_cluster.__file__).parent
    doc = aio_cluster.__doc__ or ""
    mapped = re.findall(r"^ {4}(\S+\.py|\S+/) {2,}\S", doc, flags=re.MULTILINE)
    present = [path.name for path in package.glob("*.py") if path.name != "__init__.py"]
    present += [f"{path.name}/" for path in package.iterdir() if (path / "__init__.py").is_file()]
    assert sorted(mapped) == sorted(present)
    assert mapped == sorted(mapped), "the map is in alphabetical order"
