"""Kafka connection options: what is accepted, what is refused and why, and that no secret shows."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import trustme

from aio_cluster import ConfigurationError, KafkaOptions

SECRET = "s3cret-Pa55word"


def test_accepted_options_pass_through_unchanged() -> None:
    context = ssl.create_default_context()
    options = KafkaOptions(
        security_protocol="SASL_SSL",
        ssl_context=context,
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="alice",
        sasl_plain_password=SECRET,
        request_timeout_ms=5000,
    )
    assert isinstance(options, dict)
    assert options["ssl_context"] is context
    assert options["sasl_plain_password"] == SECRET
    assert options["request_timeout_ms"] == 5000


def test_tls_without_a_context_gets_one_trusting_the_system() -> None:
    options = KafkaOptions(security_protocol="SSL")
    assert isinstance(options["ssl_context"], ssl.SSLContext)
    assert options["ssl_context"].verify_mode is ssl.CERT_REQUIRED


@pytest.mark.parametrize(
    "key", ["group_id", "enable_auto_commit", "auto_offset_reset", "client_id", "fetch_min_bytes"]
)
def test_keys_the_library_sets_are_refused_listing_the_accepted(key: str) -> None:
    with pytest.raises(ConfigurationError, match=key) as raised:
        KafkaOptions({key: "x"})
    assert "accepted keys: connections_max_idle_ms" in str(raised.value)
    assert "security_protocol" in str(raised.value)


def test_unknown_key_is_refused_listing_the_accepted() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown kafka_options key 'ssl_cafile'.*sasl"):
        KafkaOptions(ssl_cafile="/ca.pem")


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"security_protocol": "TLS"}, "use one of PLAINTEXT, SSL"),
        ({"sasl_mechanism": "SCRAM"}, "SCRAM-SHA-512"),
        ({"ssl_context": "ca.pem"}, "must be an ssl.SSLContext, not str"),
        ({"request_timeout_ms": 0}, "at least 1"),
        ({"security_protocol": "SASL_SSL", "sasl_plain_username": "u"}, "sasl_plain_password"),
        ({"ssl_context": ssl.create_default_context()}, "security_protocol is 'PLAINTEXT'"),
    ],
)
def test_bad_values_are_named(options: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        KafkaOptions(options)


def test_a_bad_secret_is_refused_without_showing_it() -> None:
    with pytest.raises(ConfigurationError) as raised:
        KafkaOptions(sasl_plain_password=12345678)
    assert "12345678" not in str(raised.value)
    assert "sasl_plain_password" in str(raised.value)


def test_repr_and_str_mask_the_secrets() -> None:
    options = KafkaOptions(
        security_protocol="SASL_PLAINTEXT", sasl_plain_username="alice", sasl_plain_password=SECRET
    )
    for shown in (repr(options), str(options), f"{options}", f"{options!r}"):
        assert SECRET not in shown
        assert "'sasl_plain_password': '***'" in shown
        assert "alice" in shown


def test_from_pairs_converts_numbers_and_makes_the_context(tmp_path: Path) -> None:
    ca = trustme.CA()
    cafile = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(cafile))
    options = KafkaOptions.from_pairs(
        ["sasl_mechanism=SCRAM-SHA-512", "request_timeout_ms=2500"], ssl_cafile=str(cafile)
    )
    assert options["security_protocol"] == "SSL"
    assert options["request_timeout_ms"] == 2500
    assert isinstance(options["ssl_context"], ssl.SSLContext)
    assert options["ssl_context"].get_ca_certs()


@pytest.mark.parametrize(
    ("pairs", "cafile", "match"),
    [
        (["security_protocol"], None, "is not KEY=VALUE"),
        (["retry_backoff_ms=1", "retry_backoff_ms=2"], None, "given twice"),
        (["ssl_context=x"], None, "use --ssl-cafile"),
        ([], "/nonexistent/ca.pem", "cannot read the CA file '/nonexistent/ca.pem'"),
        (["security_protocol=PLAINTEXT"], "CA", "security_protocol is 'PLAINTEXT'"),
        (["group_id=g"], None, "cannot be set"),
    ],
)
def test_from_pairs_refuses(
    pairs: list[str], cafile: str | None, match: str, tmp_path: Path
) -> None:
    if cafile == "CA":
        cafile = str(tmp_path / "ca.pem")
        trustme.CA().cert_pem.write_to_path(cafile)
    with pytest.raises(ConfigurationError, match=match):
        KafkaOptions.from_pairs(pairs, ssl_cafile=cafile)


def test_from_pairs_never_echoes_a_password() -> None:
    with pytest.raises(ConfigurationError) as raised:
        KafkaOptions.from_pairs(
            ["security_protocol=SASL_SSL", f"sasl_plain_password={SECRET}", "bogus=1"]
        )
    assert SECRET not in str(raised.value)
