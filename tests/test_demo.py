"""The README's first command, run to completion against the session's cluster with a short
``--duration``: nothing lost, nothing delivered twice, in both of its outputs."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import pytest

from aio_cluster.local import LocalCluster

pytestmark = pytest.mark.asyncio

DEMO = Path(__file__).parents[1] / "examples" / "demo.py"


@pytest.mark.parametrize("terminal", [False, True], ids=["plain", "live-table"])
async def test_demo_runs_to_completion_and_loses_nothing(
    cluster: LocalCluster, terminal: bool
) -> None:
    env = {
        **os.environ,
        "AIO_CLUSTER_BOOTSTRAP": cluster.bootstrap,
        "AIO_CLUSTER_ZOOKEEPER": cluster.zookeeper,
        # rich draws its live table where it believes it writes to a terminal.
        "TTY_COMPATIBLE": "1" if terminal else "0",
        "COLUMNS": "120",
    }
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, str(DEMO), "--duration", "8", "--members", "2"),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), 120)
    text = output.decode(errors="replace")
    assert process.returncode == 0, text
    summary = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text.rstrip().splitlines()[-1])
    assert summary.startswith("produced "), text
    assert summary.endswith(": lost 0, delivered twice 0"), text
    produced = int(summary.split()[1].rstrip(","))
    assert produced > 0
    assert f"consumed {produced}:" in summary
    if terminal:
        assert "records/s" in text  # the table's header
        assert "\x1b[" in text  # drawn with terminal control sequences
    else:
        assert "\x1b[" not in text
        assert "rebalance: member1 [] -> [0, 1, 2, 3, 4, 5]" in text
    # The second member's join moved partitions: a rebalance shown as it happened.
    assert "-> member2 joined" in text
