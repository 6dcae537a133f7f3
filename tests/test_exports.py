"""The public surface is exactly what ``__all__`` lists."""

from __future__ import annotations

import inspect

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
