"""A ZooKeeper chroot follows the last server only; anywhere else it is refused, naming the
server, instead of silently turning the servers after it into part of the path."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from aio_cluster import ConfigurationError, ConsumerGroup
from aio_cluster.zookeeper.client import parse_hosts


@pytest.mark.parametrize(
    ("given", "connect"),
    [
        ("h1:2181,h2:2181/app", "h1:2181,h2:2181/app"),
        (["h1:2181", "h2:2181/app"], "h1:2181,h2:2181/app"),
        ("h1:2181/app", "h1:2181/app"),
        (["h1:2181/app"], "h1:2181/app"),
        ("h1:2181, h2:2181/app/nested", "h1:2181,h2:2181/app/nested"),
        (["h1:2181", "h2:2181/app", ""], "h1:2181,h2:2181/app"),
        ("h1:2181,h2:2181", "h1:2181,h2:2181"),
        ("h1:2181/", "h1:2181"),
    ],
)
def test_a_chroot_after_the_last_server_is_kept(given: str | list[str], connect: str) -> None:
    assert parse_hosts(given) == connect


@pytest.mark.parametrize(
    ("given", "named"),
    [
        (["h1:2181/app", "h2:2181"], "h1:2181/app"),
        ("h1:2181/app,h2:2181", "h1:2181/app"),
        ("h1:2181,h2:2181/app,h3:2181", "h2:2181/app"),
        (["h1:2181/a", "h2:2181/b"], "h1:2181/a"),
    ],
)
def test_a_chroot_before_another_server_is_refused(given: str | list[str], named: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        parse_hosts(given)
    assert f"ZooKeeper server {named!r}" in str(raised.value)
    assert "only the last server" in str(raised.value)


def test_a_member_refuses_the_ambiguous_chroot_when_made() -> None:
    with pytest.raises(ConfigurationError, match="'h1:2181/app' in 'h1:2181/app,h2:2181'"):
        ConsumerGroup("g", "127.0.0.1:9092", ["h1:2181/app", "h2:2181"], "t")


def test_the_configuration_pages_chroot_table_is_what_happens() -> None:
    page = Path(__file__).parents[1] / "docs" / "configuration.md"
    section = page.read_text().split("## A ZooKeeper chroot", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([\"\[].*?)` \| (.+?) \| (.+?) \|$", section, re.MULTILINE)
    assert len(rows) >= 4, "the table was not found"
    for given, servers, chroot in rows:
        hosts = ast.literal_eval(given)
        if servers == "refused":
            with pytest.raises(ConfigurationError) as raised:
                parse_hosts(hosts)
            assert chroot.strip("`").removesuffix(" ...") in f"ConfigurationError: {raised.value}"
        else:
            names = [name.strip() for name in servers.split(",")]
            expected = ",".join(f"{name}:2181" for name in names) + chroot.strip("`")
            assert parse_hosts(hosts) == expected
