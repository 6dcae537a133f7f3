"""The documentation's bad-input table is what the library does: every row of
``docs/bad-input.md``'s "When a member is made" table, tried."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

import aio_cluster
from aio_cluster import ConsumerGroup

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
