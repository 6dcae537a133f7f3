"""Class-data sharing for the local cluster's JVMs: a JVM started with an archive of the classes
an earlier run of the same program loaded maps them instead of reading, parsing and checking
them again. A cluster then starts on about a third less CPU (6.4 CPU-seconds to 4.0 for a
single node on a 2-core machine, ``benchmarks/startup.py``), which counts where tests start many.

The first JVM of a program (main class, class path, Java) to start without an archive writes one
as it exits (``-XX:ArchiveClassesAtExit``), to a name of its own, renamed into place once it
ended by itself or on SIGTERM; JVMs started meanwhile, by this process or another, run without.
A JVM given an archive that does not fit (a Java upgraded in place) ignores it and starts as
before (the JVM's default, ``-Xshare:auto``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from pathlib import Path
from typing import IO

__all__ = ["ClassArchive"]


class ClassArchive:
    """The archive of one program (``main_class`` on the jars of ``classpath``, run by
    ``java``), kept beside those jars."""

    def __init__(self, java: str, classpath: Path, main_class: str) -> None:
        # The JVM checks the archive against the class path it was written with, resolved as
        # `process.java_command` gives it: a cache reached through a link, moved or with other
        # jars gets an archive of its own instead of one every start would reject.
        key = _key(java, classpath.resolve())
        self.path = classpath.parent / "class-archives" / f"{classpath.name}-{main_class}-{key}.jsa"
        self._writing: Path | None = None
        self._lock: IO[bytes] | None = None

    @property
    def writing(self) -> bool:
        """Whether the JVM started with `flags` writes the archive as it exits."""
        return self._writing is not None

    def flags(self) -> list[str]:
        """The JVM flags of a start: the archive's, or those that write it, or none while
        another JVM writes it."""
        if self.path.exists():
            return [f"-XX:SharedArchiveFile={self.path}"]
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            lock = self.path.with_suffix(".lock").open("ab")
        except OSError:
            return []  # a cache this process may not write: the JVM starts as it would without
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            return []  # another JVM writes it
        if self.path.exists():  # written while this one waited for the lock
            lock.close()
            return [f"-XX:SharedArchiveFile={self.path}"]
        for left in self.path.parent.glob(f".{self.path.name}.*"):
            left.unlink(missing_ok=True)  # of a writer killed before it ended
        self._lock = lock
        self._writing = self.path.with_name(f".{self.path.name}.{os.getpid()}.{id(self)}")
        return [f"-XX:ArchiveClassesAtExit={self._writing}"]

    def ended(self, *, cleanly: bool) -> None:
        """The JVM started with `flags` has exited: keep what it wrote if it ended by itself or
        on SIGTERM (a JVM killed may have written part of it), and let others write it."""
        writing, lock = self._writing, self._lock
        self._writing = self._lock = None
        if writing is not None:
            if cleanly and writing.exists():
                writing.replace(self.path)
            else:
                with contextlib.suppress(FileNotFoundError):
                    writing.unlink()
        if lock is not None:
            lock.close()


def _key(java: str, classpath: Path) -> str:
    """Names the Java build and the jars: an archive fits only the JVM that wrote it, on the
    class path it was written with."""
    binary = Path(java).resolve()
    jvm = binary.parent.parent / "lib" / "server" / "libjvm.so"
    described = jvm if jvm.exists() else binary
    stat = described.stat()
    jars = sorted(f"{jar.name}:{jar.stat().st_size}" for jar in classpath.glob("*.jar"))
    text = "\n".join([f"{described}:{stat.st_size}:{stat.st_mtime_ns}", str(classpath), *jars])
    return hashlib.sha256(text.encode()).hexdigest()[:12]
