"""The soak's long-lived member: ``tests/member_worker.py`` (same arguments, same output file,
same signals) that also reports its own resources.

Each line read on its standard input is answered on its standard output (after the worker's
``joined``) with one JSON object: ``rss_kib`` (resident memory), ``fds`` (open descriptors),
``threads`` (the process's threads as the kernel counts them: kazoo's, the executor's) and
``tasks`` (asyncio tasks of its loop, this reporter's own left out). Read from inside the
process, so that the figures are the member's own, not those of the test process that churns the
group around it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/, for member_worker

import member_worker


def _status(field: str) -> int:
    """A number of ``/proc/self/status`` (``VmRSS`` in KiB, ``Threads``)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name == field:
                return int(value.split()[0])
    raise LookupError(f"/proc/self/status has no {field}")


def sample() -> dict[str, int]:
    """The process's figures now (see the module)."""
    return {
        "rss_kib": _status("VmRSS"),
        "fds": len(os.listdir("/proc/self/fd")),
        "threads": _status("Threads"),
        "tasks": len(asyncio.all_tasks()) - 1,
    }


async def report_on_request() -> None:
    """Answer each line of standard input with a `sample()`, until the input ends."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while await reader.readline():
        print(json.dumps(sample()), flush=True)


async def main(arguments: list[str]) -> None:
    reporter = asyncio.create_task(report_on_request())
    try:
        await member_worker.main(*arguments)
    finally:
        reporter.cancel()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
