"""The ``aio-cluster`` command on a group whose ZooKeeper nodes carry the creator ACL, against the
real server: the group's credentials (from the environment or a file) describe and reset it;
none or wrong ones are one line naming the refusal; the secret is in no output."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from test_check import consume_all

from aio_cluster import ConsumerGroup
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from conftest import MakeTopic, Produce
from support import stored_offsets
from test_cli import one_line, run

pytestmark = pytest.mark.asyncio

SECRET = "right-Pa55word"
WRONG_SECRET = "wrong-Pa55word"
RIGHT = f"digest:orders:{SECRET}"
WRONG = f"digest:intruder:{WRONG_SECRET}"
AUTH = "AIO_CLUSTER_ZOOKEEPER_AUTH"


@pytest_asyncio.fixture
async def secured(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, group_name: str
) -> AsyncIterator[tuple[str, str, dict[int, int]]]:
    """A group made with ``zookeeper_auth`` and ``zookeeper_acl="creator"`` that committed 20
    records of a 2-partition topic and left: ``(group, topic, stored offsets)``."""
    topic = await make_topic(partitions=2)
    counts = await produce(topic, 20)
    async with ConsumerGroup(
        group_name,
        cluster.bootstrap,
        cluster.zookeeper,
        topic,
        commit_interval=0.1,
        zookeeper_auth=[("digest", f"orders:{SECRET}")],
        zookeeper_acl="creator",
    ) as group:
        await consume_all(group, 20)
    yield group_name, topic, dict(counts)


def no_secret(*outputs: str) -> None:
    for text in outputs:
        assert SECRET not in text
        assert WRONG_SECRET not in text


async def test_the_right_credentials_describe_and_reset_the_group(
    cluster: LocalCluster, zk: ZooKeeper, secured: tuple[str, str, dict[int, int]], tmp_path: Path
) -> None:
    group, topic, stored = secured
    layout = GroupLayout(group, topic)
    assert await stored_offsets(zk, layout, 2) == stored

    code, out, err = await run(cluster, "describe", group, "--json", env={AUTH: RIGHT})
    assert code == 0, err
    assert [(row["partition"], row["committed"]) for row in json.loads(out)] == sorted(
        stored.items()
    )
    no_secret(out, err)

    args = ("reset-offsets", group, "--topic", topic)
    code, out, err = await run(cluster, *args, "--to-earliest", "--execute", env={AUTH: RIGHT})
    assert code == 0, err
    no_secret(out, err)
    assert await stored_offsets(zk, layout, 2) == {0: 0, 1: 0}

    # The same from a file, so that the secret is in neither the environment nor the history.
    secret_file = tmp_path / "zookeeper-auth"
    secret_file.write_text(f"# the group's identity\n{RIGHT}\n")
    code, out, err = await run(
        cluster, *args, "--to-latest", "--execute", "--zookeeper-auth-file", str(secret_file)
    )
    assert code == 0, err
    no_secret(out, err)
    assert await stored_offsets(zk, layout, 2) == stored


@pytest.mark.parametrize("credentials", ["none", "wrong"])
async def test_no_or_wrong_credentials_are_refused_in_one_line(
    cluster: LocalCluster,
    zk: ZooKeeper,
    secured: tuple[str, str, dict[int, int]],
    credentials: str,
) -> None:
    group, topic, stored = secured
    layout = GroupLayout(group, topic)
    env = {} if credentials == "none" else {AUTH: WRONG}
    args = ("reset-offsets", group, "--topic", topic, "--to-earliest")

    # Anyone may read a creator-ACL group: looking at it needs no credentials.
    code, out, err = await run(cluster, "describe", group, "--json", env=env)
    assert code == 0, err
    code, out, err = await run(cluster, *args, env=env)  # the plan is a look too
    assert code == 0, err
    assert "dry run" in out

    code, out, err = await run(cluster, *args, "--execute", env=env)
    assert code == 1, (out, err)
    assert out.count("\n") == 3  # the plan: a header and two partitions; nothing more
    line = one_line(err)
    assert line.startswith("aio-cluster: refused by ZooKeeper: the ACL of ")
    assert layout.offsets in line
    no_secret(out, err)
    assert await stored_offsets(zk, layout, 2) == stored

    # Joining the group needs its identity as well.
    code, out, err = await run(cluster, "consume", group, topic, env=env)
    assert code == 1, (out, err)
    line = one_line(err)
    assert line.startswith("aio-cluster: refused by ZooKeeper: create ")
    assert "not allowed by the node's ACL" in line
    no_secret(out, err)


@pytest.mark.parametrize(
    ("env", "args", "message"),
    [
        ({AUTH: f"digest-{SECRET}"}, [], f"${AUTH} is not of the form digest:user:password"),
        ({AUTH: f"kerberos:orders:{SECRET}"}, [], "has scheme 'kerberos'; use one of digest"),
        ({}, ["--zookeeper-acl", "creator"], "--zookeeper-acl creator needs credentials"),
        ({}, ["--zookeeper-auth-file", "/no/such/file"], "cannot read --zookeeper-auth-file"),
        ({}, ["--zookeeper-cafile", "/no/such/ca.pem"], "--zookeeper-cafile /no/such/ca.pem: no"),
    ],
)
async def test_bad_security_settings_are_one_line_without_the_secret(
    cluster: LocalCluster, env: dict[str, str], args: list[str], message: str
) -> None:
    code, out, err = await run(cluster, "list", *args, env=env)
    assert code == 1, (out, err)
    assert message in one_line(err)
    no_secret(out, err)


# kazoo 2.11 leaves the socket of a failed TLS handshake open (see test_security_tls.py).
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_the_command_speaks_tls_to_zookeeper_with_its_ca(tls_cluster: LocalCluster) -> None:
    ca = str(tls_cluster.ca_file)
    secure = {"AIO_CLUSTER_ZOOKEEPER": tls_cluster.zookeeper_secure}
    code, out, err = await run(tls_cluster, "list", "--json", "--zookeeper-cafile", ca, env=secure)
    assert code == 0, err
    assert isinstance(json.loads(out), list)
    code, out, err = await run(
        tls_cluster, "list", "--json", env={**secure, "AIO_CLUSTER_ZOOKEEPER_CAFILE": ca}
    )
    assert code == 0, err
    code, out, err = await run(tls_cluster, "list", "--timeout", "2", env=secure)
    assert code == 1, (out, err)
    assert f"ZooKeeper {tls_cluster.zookeeper_secure} expects TLS" in one_line(err)
