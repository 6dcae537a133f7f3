"""The command after a plain install (no extras), against the real servers: a fresh virtualenv
gets only the package and its dependencies, and its console script lists, describes and resets
a group. Slow (it builds and installs the package), so it is one test. The install is uv's where
uv is installed (CI installs it), else pip's: both build the package with its own build backend
and resolve the same metadata, and uv does it in seconds where pip took over a CPU-minute; their
caches keep either from downloading again."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from aio_cluster import ConsumerGroup
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from conftest import MakeTopic, Produce
from support import closable, stored_offsets

REPO = Path(__file__).resolve().parent.parent


async def _run(*command: str | Path, env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *command,
        env=env,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 600)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.mark.asyncio
@pytest.mark.timeout(900)
async def test_a_plain_install_lists_describes_and_resets(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
    tmp_path: Path,
) -> None:
    # Outside the repository, and with no variable of the test's environment leaking in.
    base = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AIO_CLUSTER_", "PYTHON", "VIRTUAL_ENV"))
    }
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    uv = shutil.which("uv")
    made: tuple[str | Path, ...]
    install: tuple[str | Path, ...]
    listing: tuple[str | Path, ...]
    if uv is not None:
        made = (uv, "venv", "--quiet", "--python", sys.executable, venv)
        install = (uv, "pip", "install", "--quiet", "--python", python, REPO)
        listing = (uv, "pip", "list", "--python", python)
    else:
        made = (sys.executable, "-m", "venv", venv)
        install = (python, "-m", "pip", "install", "-q", REPO)
        listing = (python, "-m", "pip", "list")
    code, out, err = await _run(*made, env=base, cwd=tmp_path)
    assert code == 0, err
    code, out, err = await _run(*install, env=base, cwd=tmp_path)
    assert code == 0, out + err
    # Only the package and its dependencies: no extra came along.
    code, out, err = await _run(*listing, env=base, cwd=tmp_path)
    assert code == 0, err
    installed = {line.split()[0].lower() for line in out.splitlines()[2:]}
    assert "aio-cluster" in installed
    assert not installed & {
        "prometheus-client",
        "fastapi",
        "pytest",
        "httpx",
        "trustme",
        "opentelemetry-api",
    }
    command = venv / "bin" / "aio-cluster"
    env = {
        **base,
        "AIO_CLUSTER_BOOTSTRAP": cluster.bootstrap,
        "AIO_CLUSTER_ZOOKEEPER": cluster.zookeeper,
    }

    topic = await make_topic(partitions=2)
    counts = await produce(topic, 20)
    async with ConsumerGroup(group_name, cluster.bootstrap, cluster.zookeeper, topic) as group:
        taken = 0
        async with contextlib.aclosing(closable(group.batches(commit=False))) as batches:
            async for partition, batch in batches:
                await group.commit(partition, batch[-1].offset + 1)
                taken += len(batch)
                if taken == 20:
                    break

        code, out, err = await _run(command, "list", env=env, cwd=tmp_path)
        assert code == 0, err
        assert any(line.split() == [group_name, topic, "1"] for line in out.splitlines()), out

        code, out, err = await _run(command, "describe", group_name, env=env, cwd=tmp_path)
        assert code == 0, err
        assert group.id in out
        for partition in (0, 1):
            assert any(
                line.split()[:2] == [topic, str(partition)] and line.split()[-1] == "0"
                for line in out.splitlines()
            ), out
        code, out, err = await _run(
            command, "describe", group_name, "--json", env=env, cwd=tmp_path
        )
        assert code == 0, err
        assert [row["committed"] for row in json.loads(out)] == [counts[0], counts[1]]

    layout = GroupLayout(group_name, topic)
    reset = ("reset-offsets", group_name, "--topic", topic, "--to-earliest")
    code, out, err = await _run(command, *reset, env=env, cwd=tmp_path)
    assert code == 0, err
    assert "dry run" in out
    assert await stored_offsets(zk, layout, 2) == dict(counts)
    code, out, err = await _run(command, *reset, "--execute", env=env, cwd=tmp_path)
    assert code == 0, err
    assert "stored the new offsets of 2 partition(s)" in out
    assert await stored_offsets(zk, layout, 2) == {0: 0, 1: 0}
