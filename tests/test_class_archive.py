"""The local cluster's JVMs share class data: the first start of a program writes its archive as
it exits, later starts map it; one writer at a time, and nothing kept of a JVM that was killed."""

from __future__ import annotations

from pathlib import Path

import pytest

from aio_cluster.local import LocalCluster, jars
from aio_cluster.local.class_archive import ClassArchive
from aio_cluster.local.process import find_java


def archive_of(tmp_path: Path, java: str) -> ClassArchive:
    classpath = tmp_path / "kafka"
    classpath.mkdir(exist_ok=True)
    return ClassArchive(java, classpath, "kafka.Kafka")


@pytest.fixture
def java() -> str:
    found = find_java()
    if found is None:
        pytest.skip("no Java")
    return found


def test_one_start_writes_the_archive_while_others_run_without(tmp_path: Path, java: str) -> None:
    first, second = archive_of(tmp_path, java), archive_of(tmp_path, java)
    writing = first.flags()
    assert len(writing) == 1
    assert writing[0].startswith("-XX:ArchiveClassesAtExit=")
    assert second.flags() == []  # the first holds the lock
    Path(writing[0].partition("=")[2]).write_bytes(b"archive")
    first.ended(cleanly=True)
    assert first.path.read_bytes() == b"archive"
    assert second.flags() == [f"-XX:SharedArchiveFile={first.path}"]


def test_what_a_killed_jvm_wrote_is_not_kept(tmp_path: Path, java: str) -> None:
    first, second = archive_of(tmp_path, java), archive_of(tmp_path, java)
    written = Path(first.flags()[0].partition("=")[2])
    written.write_bytes(b"part of an archive")
    first.ended(cleanly=False)
    assert not written.exists()
    assert not first.path.exists()
    assert second.flags()[0].startswith("-XX:ArchiveClassesAtExit=")  # the lock was let go
    second.ended(cleanly=False)


@pytest.mark.own_cluster
@pytest.mark.asyncio
async def test_a_second_start_maps_the_archives_the_first_wrote(tmp_path: Path) -> None:
    """On a jar cache of the test's own whose jars are the shared cache's, so that the archives
    start absent."""
    shared = jars.default_cache_dir()
    own = tmp_path / "cache"
    for fetched in shared.glob("*/*/"):
        if fetched.name in {"kafka", "zookeeper"}:
            (own / fetched.parent.name).mkdir(parents=True, exist_ok=True)
            (own / fetched.parent.name / fetched.name).symlink_to(fetched)
    async with LocalCluster(use_env=False, cache_dir=own) as cluster:
        if cluster.mode != "java":
            pytest.skip("class-data sharing is the Java-started cluster's")
    written = sorted(path.name.split("-")[1] for path in own.glob("*/class-archives/*.jsa"))
    assert written == [
        "kafka.Kafka",
        "kafka.tools.StorageTool",
        "org.apache.zookeeper.server.quorum.QuorumPeerMain",
    ]
    async with LocalCluster(use_env=False, cache_dir=own):
        mapped = [
            pid
            for pid, command in _processes()
            if str(own) in command and _maps_an_archive(pid, own)
        ]
        assert len(mapped) == 2, mapped  # ZooKeeper and Kafka (the format ran already)


def _maps_an_archive(pid: str, cache: Path) -> bool:
    """Whether the process maps one of the archives of ``cache`` (the JVM took it)."""
    try:
        maps = (Path("/proc") / pid / "maps").read_text()
    except OSError:
        return False
    return any(str(path) in maps for path in cache.glob("*/class-archives/*.jsa"))


def _processes() -> list[tuple[str, str]]:
    """(pid, command line) of each process."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            found.append((entry.name, command))
    return found
