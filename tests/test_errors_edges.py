"""Errors at the edges, against the real servers: every accepted Kafka option gives a typed error
when Kafka is unreachable, an unregistered member leaves no client open, a member made outside a
running loop is refused, and no secret reaches the command's output or kazoo's log."""

from __future__ import annotations

import asyncio
import binascii
import contextlib
import gc
import logging
import os
import socket
import ssl
import sys
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.abc import AbstractTokenProvider

from aio_cluster import (
    AioClusterError,
    BrokerError,
    ConfigurationError,
    ConsumerGroup,
    KafkaOptions,
)
from aio_cluster.kafka import options as kafka_options
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.values import SessionState

from support import wait_until

SECRET = "hunter2-Pa55word"
REPO = Path(__file__).resolve().parent.parent


class Tokens(AbstractTokenProvider):  # type: ignore[misc]  # aiokafka ships no types
    async def token(self) -> str:
        return SECRET


def _sasl(mechanism: str, **more: Any) -> dict[str, Any]:
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism, **more}


_PLAIN = _sasl("PLAIN", sasl_plain_username="alice", sasl_plain_password=SECRET)
# One set of options per key KafkaOptions accepts, with what that key needs beside it.
EVERY_KEY: dict[str, dict[str, Any]] = {
    "security_protocol": {"security_protocol": "PLAINTEXT"},
    "ssl_context": {"security_protocol": "SSL", "ssl_context": ssl.create_default_context()},
    "sasl_mechanism": _sasl("SCRAM-SHA-256", sasl_plain_username="a", sasl_plain_password=SECRET),
    "sasl_plain_username": _PLAIN,
    "sasl_plain_password": _PLAIN,
    "sasl_kerberos_service_name": _sasl("GSSAPI", sasl_kerberos_service_name="kafka"),
    "sasl_kerberos_domain_name": _sasl("GSSAPI", sasl_kerberos_domain_name="example.org"),
    "sasl_oauth_token_provider": _sasl("OAUTHBEARER", sasl_oauth_token_provider=Tokens()),
    "request_timeout_ms": {"request_timeout_ms": 2000},
    "connections_max_idle_ms": {"connections_max_idle_ms": 10_000},
    "metadata_max_age_ms": {"metadata_max_age_ms": 1000},
    "retry_backoff_ms": {"retry_backoff_ms": 100},
}


def test_every_accepted_key_is_tried() -> None:
    assert set(EVERY_KEY) == set(kafka_options._ACCEPTED)


def closed_port() -> int:
    """A port nothing listens on (bound a moment, never listening): connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.asyncio
@pytest.mark.parametrize("key", sorted(EVERY_KEY))
async def test_every_accepted_option_gives_a_typed_error_when_kafka_is_away(
    cluster: LocalCluster, group_name: str, key: str
) -> None:

    async def join() -> None:
        member = ConsumerGroup(
            group_name,
            f"127.0.0.1:{closed_port()}",
            cluster.zookeeper,
            "some-topic",
            kafka_options=EVERY_KEY[key],
            request_timeout=2.0,
        )
        await member.register()

    with pytest.raises(AioClusterError) as raised:
        await join()
    if isinstance(raised.value, ConfigurationError):
        # Refused before any connection (GSSAPI without its package): typed all the same.
        assert key.startswith("sasl_kerberos")
        assert "gssapi" in str(raised.value)
        return
    assert isinstance(raised.value, BrokerError), raised.value
    assert SECRET not in str(raised.value)


@contextlib.contextmanager
def resource_warnings() -> Any:
    """The ResourceWarnings raised meanwhile, garbage collected at the end."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        yield caught
        gc.collect()


@pytest.mark.asyncio
@pytest.mark.parametrize("kafka_offsets", ["off", "mirror"])
async def test_an_unregistered_member_leaves_nothing_open(
    cluster: LocalCluster, group_name: str, kafka_offsets: Any
) -> None:
    with resource_warnings() as caught:
        async with ConsumerGroup(
            group_name,
            cluster.bootstrap,
            cluster.zookeeper,
            "some-topic",
            register=False,
            kafka_offsets=kafka_offsets,
        ):
            pass
        await asyncio.sleep(0)
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_a_member_made_outside_a_running_loop_is_refused() -> None:
    page = (REPO / "docs" / "bad-input.md").read_text()
    with pytest.raises(ConfigurationError) as raised:
        ConsumerGroup("g", "127.0.0.1:9092", "127.0.0.1:2181", "t")
    assert str(raised.value) in " ".join(page.split()), "docs/bad-input.md does not quote it"
    # Bad arguments are still named first.
    with pytest.raises(ConfigurationError, match="max_bytes"):
        ConsumerGroup("g", "127.0.0.1:9092", "127.0.0.1:2181", "t", max_bytes=0)


@pytest.mark.parametrize(
    "option",
    [
        f"sasl_plain_password {SECRET}",
        f"sasl_plain_password:{SECRET}",
        f"={SECRET}",
        SECRET,
    ],
)
def test_a_malformed_kafka_option_never_echoes_its_value(option: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        KafkaOptions.from_pairs(["security_protocol=SASL_SSL", option])
    assert SECRET not in str(raised.value)
    assert "not KEY=VALUE" in str(raised.value)


@pytest.mark.asyncio
async def test_the_command_never_echoes_a_malformed_secret_option(cluster: LocalCluster) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AIO_CLUSTER_")}
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "aio_cluster", "describe", "some-group"),
        *("--bootstrap", cluster.bootstrap, "--zookeeper", cluster.zookeeper),
        *("--kafka-option", f"sasl_plain_password {SECRET}"),
        cwd=REPO,
        env=environment,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 1
    assert "sasl_plain_password" in err.decode()
    assert SECRET not in out.decode() + err.decode()


class Proxy:
    """A TCP relay to one server whose connections the test can cut (the client reconnects,
    resuming its session with the session's password)."""

    def __init__(self, target: str) -> None:
        host, _, port = target.partition("/")[0].rpartition(":")
        self._target = (host, int(port))
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None
        self.address = ""

    async def __aenter__(self) -> Proxy:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.address = f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        self.cut()
        await self._server.wait_closed()

    def cut(self) -> None:
        for writer in self._writers:
            writer.close()
        self._writers.clear()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._target)
        self._writers += [writer, up_writer]

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            sink.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


@contextlib.asynccontextmanager
async def resumed_session(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> AsyncIterator[ZooKeeper]:
    async with Proxy(cluster.zookeeper) as proxy:
        client = ZooKeeper(proxy.address, session_timeout=10.0, request_timeout=5.0)
        await client.start()
        try:
            proxy.cut()

            def resumed() -> bool:
                resuming = f"session_id={client.session_id},"
                sent = [r.getMessage() for r in caplog.records if "Sending request" in r.msg]
                return client.state is SessionState.CONNECTED and any(
                    "Connect(" in message and resuming in message for message in sent
                )

            await wait_until(resumed, what="the client resumed its session")
            await client.exists("/")
            yield client
        finally:
            await client.close()


@pytest.mark.asyncio
async def test_the_session_password_never_reaches_kazoos_log(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(1)  # everything, kazoo's BLATHER included
    async with resumed_session(cluster, caplog) as client:
        password = client.session_password
        assert password is not None
        assert any(password), "no session password to look for"
    logged = "\n".join(record.getMessage() for record in caplog.records) + caplog.text
    assert "passwd=b'***'" in logged, "kazoo's Connect request was not logged: nothing was seen"
    assert repr(password) not in logged
    assert binascii.hexlify(password).decode() not in logged
    assert all(record.levelno < logging.ERROR for record in caplog.records)


@pytest.mark.asyncio
async def test_an_unquoted_secret_option_value_is_not_echoed_as_a_stray_argument() -> None:
    """``--kafka-option sasl_plain_password hunter2`` without quotes: argparse would name the
    password as an unrecognized argument."""
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "aio_cluster", "describe", "some-group"),
        *("--zookeeper", "127.0.0.1:1", "--kafka-option", "sasl_plain_password", SECRET),
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 2
    assert "unrecognized arguments" in err.decode()
    assert SECRET not in out.decode() + err.decode()


def test_registering_in_another_loop_is_refused() -> None:
    async def make() -> ConsumerGroup:
        return ConsumerGroup("g", "127.0.0.1:9092", "127.0.0.1:2181", "t")

    made = asyncio.run(make())

    async def use() -> None:
        with pytest.raises(ConfigurationError, match="event loop it was made in"):
            await made.register()
        await made.close()

    with resource_warnings() as caught:
        asyncio.run(use())
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
