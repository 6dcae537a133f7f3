"""The ZooKeeper adapter's security against the real server: digest authentication, the
creator ACL (read by anyone, changed only by its identity), typed refusals, no credential logged;
TLS with the installed kazoo, a host name check included (kazoo takes it from 2.11)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from aio_cluster import AccessDeniedError, ConfigurationError, ZooKeeperTLS
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.values import Create, SetData

ALICE = ("digest", "alice:alice-Pa55word")
BOB = ("digest", "bob:bob-Pa55word")


@pytest_asyncio.fixture
async def chroot(cluster: LocalCluster) -> str:
    """A fresh chroot, so that this test's identity creates ``/consumers`` itself."""
    root = f"/security-{uuid.uuid4().hex[:12]}"
    plain = ZooKeeper(cluster.zookeeper)
    await plain.start()
    try:
        await plain.ensure_path(root)
    finally:
        await plain.close()
    return cluster.zookeeper + root


@pytest_asyncio.fixture
async def alice(chroot: str) -> AsyncIterator[ZooKeeper]:
    client = ZooKeeper(chroot, auth=[ALICE], acl="creator")
    await client.start()
    yield client
    await client.close()


@pytest_asyncio.fixture
async def anonymous(chroot: str) -> AsyncIterator[KazooClient]:
    """A plain kazoo client without credentials."""
    client = KazooClient(hosts=chroot)
    await asyncio.to_thread(client.start, 10)
    yield client
    await asyncio.to_thread(client.stop)
    await asyncio.to_thread(client.close)


async def _make_group(zk: ZooKeeper) -> None:
    """The nodes a member writes: the shared root, the group's parents, an offset, a claim."""
    await zk.ensure_path("/consumers", shared=True)
    for path in ("/consumers/g/ids", "/consumers/g/owners/t", "/consumers/g/offsets/t"):
        await zk.ensure_path(path)
    await zk.transaction([Create("/consumers/g/offsets/t/0", b"5")])
    await zk.create("/consumers/g/owners/t/0", b"member-a", ephemeral=True)
    await zk.create("/consumers/g/ids/member-a", b"{}", ephemeral=True)


@pytest.mark.asyncio
async def test_creator_acl_lets_anyone_read_and_only_its_identity_change(
    alice: ZooKeeper, anonymous: KazooClient, chroot: str
) -> None:
    await _make_group(alice)

    data, _stat = await asyncio.to_thread(anonymous.get, "/consumers/g/offsets/t/0")
    assert data == b"5"
    assert await asyncio.to_thread(anonymous.get_children, "/consumers/g/ids") == ["member-a"]
    with pytest.raises(NoAuthError):
        await asyncio.to_thread(anonymous.set, "/consumers/g/offsets/t/0", b"0")
    with pytest.raises(NoAuthError):
        await asyncio.to_thread(anonymous.delete, "/consumers/g/owners/t/0")
    with pytest.raises(NoAuthError):
        await asyncio.to_thread(anonymous.create, "/consumers/g/ids/intruder", b"{}")
    with pytest.raises(NoAuthError):
        await asyncio.to_thread(anonymous.delete, "/consumers/g/offsets/t/0")
    # The shared root takes other groups, but theirs stay theirs.
    await asyncio.to_thread(anonymous.create, "/consumers/other", b"")
    with pytest.raises(NoAuthError):
        await asyncio.to_thread(anonymous.delete, "/consumers/g", recursive=True)

    second = ZooKeeper(chroot, auth=[ALICE], acl="creator")
    await second.start()
    try:
        await second.transaction([SetData("/consumers/g/offsets/t/0", b"7")])
        await second.delete("/consumers/g/owners/t/0")
        await second.create("/consumers/g/ids/member-b", b"{}", ephemeral=True)
    finally:
        await second.close()
    assert (await alice.get("/consumers/g/offsets/t/0"))[0] == b"7"


@pytest.mark.asyncio
async def test_another_identity_gets_access_denied_naming_the_node(
    alice: ZooKeeper, chroot: str
) -> None:
    await _make_group(alice)
    bob = ZooKeeper(chroot, auth=[BOB], acl="creator")
    await bob.start()
    try:
        with pytest.raises(AccessDeniedError, match="/consumers/g/offsets/t/0") as raised:
            await bob.set("/consumers/g/offsets/t/0", b"0")
        with pytest.raises(AccessDeniedError, match=r"SetData.*/consumers/g/offsets/t/0"):
            await bob.transaction([SetData("/consumers/g/offsets/t/0", b"0")])
        with pytest.raises(AccessDeniedError):
            await bob.create("/consumers/g/ids/bob", b"{}", ephemeral=True)
    finally:
        await bob.close()
    assert "Pa55word" not in str(raised.value)
    assert not raised.value.retriable


def test_bad_settings_are_refused_without_showing_the_password() -> None:
    with pytest.raises(ConfigurationError, match="needs zookeeper_auth"):
        ZooKeeper("127.0.0.1:2181", acl="creator")
    with pytest.raises(ConfigurationError, match="use one of open, creator"):
        ZooKeeper("127.0.0.1:2181", acl="private")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="scheme 'sasl'"):
        ZooKeeper("127.0.0.1:2181", auth=[("sasl", "alice:secret-one")])
    with pytest.raises(ConfigurationError, match="user:password") as raised:
        ZooKeeper("127.0.0.1:2181", auth=[("digest", "secret-two")])
    assert "secret-two" not in str(raised.value)
    with pytest.raises(ConfigurationError, match="pair"):
        ZooKeeper("127.0.0.1:2181", auth="digest:alice:pw")  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_the_credential_never_reaches_the_logs(
    chroot: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(1)  # everything, kazoo's BLATHER requests included
    client = ZooKeeper(chroot, auth=[ALICE], acl="creator")
    await client.start()
    try:
        await client.ensure_path("/consumers", shared=True)
    finally:
        await client.close()
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "auth='***'" in logged, "kazoo's Auth request was not logged: the check saw nothing"
    assert "alice-Pa55word" not in logged
    assert "alice-Pa55word" not in caplog.text
    assert all(record.levelno < logging.ERROR for record in caplog.records)


async def _tls_session_works(connect: str, tls: ZooKeeperTLS) -> None:
    client = ZooKeeper(connect, tls=tls)
    await client.start()
    try:
        path = f"/tls-{uuid.uuid4().hex[:12]}"
        await client.create(path, b"over tls", ephemeral=True)
        assert (await client.get(path))[0] == b"over tls"
    finally:
        await client.close()


@pytest.mark.seams
@pytest.mark.asyncio
async def test_a_client_speaks_tls_with_the_installed_kazoo(tls_cluster: LocalCluster) -> None:
    await _tls_session_works(tls_cluster.zookeeper_secure, tls_cluster.zookeeper_tls)


@pytest.mark.seams
@pytest.mark.asyncio
async def test_a_host_name_check_is_made(tls_cluster: LocalCluster) -> None:
    checking = dataclasses.replace(tls_cluster.zookeeper_tls, check_hostname=True)
    # The certificate names 127.0.0.1, the host connected to.
    await _tls_session_works(tls_cluster.zookeeper_secure, checking)


def test_a_host_name_check_without_verified_certificates_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="needs verify_certs=True"):
        ZooKeeper("127.0.0.1:2181", tls=ZooKeeperTLS(check_hostname=True, verify_certs=False))
