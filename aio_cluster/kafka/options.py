"""Connection options for Kafka (TLS, SASL, time-outs), validated before any client is made.

A member creates several aiokafka clients (a fetching consumer, an offset look-up consumer, an
admin client); the same options go to each, under aiokafka's own names. Only connection options
are accepted: the group, offset and fetch settings belong to the library (ZooKeeper decides who
reads what, and offsets live there), so setting them through here would break it. Pure: no I/O.

The secrets (``sasl_plain_password``, ``sasl_oauth_token_provider``) never appear in a repr or in
an error message.
"""

from __future__ import annotations

import importlib.util
import ssl
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from aiokafka.abc import AbstractTokenProvider

from ..errors import ConfigurationError
from ..net.addresses import parse_servers

__all__ = ["SECRET_KEYS", "KafkaOptions", "parse_bootstrap"]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")
SECRET_KEYS = frozenset({"sasl_plain_password", "sasl_oauth_token_provider"})
"""Keys whose values are secrets: shown as ``'***'``."""
_REDACTED = "***"


def _one_of(choices: tuple[str, ...]) -> Callable[[str, object], object]:
    def check(key: str, value: object) -> object:
        if value not in choices:
            raise ConfigurationError(
                f"kafka_options[{key!r}] is {value!r}; use one of {', '.join(choices)}"
            )
        return value

    return check


def _instance(kind: type, label: str) -> Callable[[str, object], object]:
    def check(key: str, value: object) -> object:
        if not isinstance(value, kind):
            # The type only, never the value: it may be a secret.
            raise ConfigurationError(
                f"kafka_options[{key!r}] must be {label}, not {type(value).__name__}"
            )
        return value

    return check


def _milliseconds(minimum: int) -> Callable[[str, object], object]:
    def check(key: str, value: object) -> object:
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ConfigurationError(
                f"kafka_options[{key!r}] must be an integer of at least {minimum}, not {value!r}"
            )
        return value

    return check


_text = _instance(str, "a str")
_ACCEPTED: dict[str, Callable[[str, object], object]] = {
    "security_protocol": _one_of(SECURITY_PROTOCOLS),
    "ssl_context": _instance(ssl.SSLContext, "an ssl.SSLContext"),
    "sasl_mechanism": _one_of(SASL_MECHANISMS),
    "sasl_plain_username": _text,
    "sasl_plain_password": _text,
    "sasl_kerberos_service_name": _text,
    "sasl_kerberos_domain_name": _text,
    "sasl_oauth_token_provider": _instance(
        AbstractTokenProvider, "an aiokafka.abc.AbstractTokenProvider"
    ),
    "request_timeout_ms": _milliseconds(1),
    "connections_max_idle_ms": _milliseconds(1),
    "metadata_max_age_ms": _milliseconds(0),
    "retry_backoff_ms": _milliseconds(0),
}
_OWN = "ZooKeeper, not Kafka, coordinates the group and stores its offsets"
_REFUSED = {
    "bootstrap_servers": "pass the servers as the brokers argument",
    "client_id": "the library names each client after the member id",
    "group_id": _OWN,
    "group_instance_id": _OWN,
    "enable_auto_commit": _OWN,
    "auto_commit_interval_ms": _OWN,
    "auto_offset_reset": "where no offset is stored, the trail argument decides",
    "partition_assignment_strategy": "pass strategy= to ConsumerGroup",
    "max_partition_fetch_bytes": "pass max_bytes= to ConsumerGroup",
    "fetch_max_bytes": "pass max_bytes= to ConsumerGroup",
    "fetch_max_wait_ms": "pass max_wait= (seconds) to ConsumerGroup",
    "fetch_min_bytes": "pass min_bytes= to ConsumerGroup",
    "key_deserializer": "pass key_deserializer= to ConsumerGroup",
    "value_deserializer": "pass value_deserializer= to ConsumerGroup",
    "isolation_level": "pass isolation_level= to ConsumerGroup",
}


def _accepted_list() -> str:
    return ", ".join(sorted(_ACCEPTED))


def _validate(options: Mapping[str, object]) -> dict[str, object]:
    """The options checked, with an ``ssl_context`` trusting the system's CAs added where TLS is
    asked for without one."""
    checked: dict[str, object] = {}
    for key, value in options.items():
        if key in _REFUSED:
            raise ConfigurationError(
                f"kafka_options[{key!r}] cannot be set: {_REFUSED[key]}; "
                f"accepted keys: {_accepted_list()}"
            )
        check = _ACCEPTED.get(key)
        if check is None:
            raise ConfigurationError(
                f"unknown kafka_options key {key!r}; accepted keys: {_accepted_list()}"
            )
        checked[key] = check(key, value)
    protocol = str(checked.get("security_protocol", "PLAINTEXT"))
    if protocol in ("SSL", "SASL_SSL"):
        checked.setdefault("ssl_context", ssl.create_default_context())
    elif "ssl_context" in checked:
        raise ConfigurationError(
            f"kafka_options has an ssl_context but security_protocol is {protocol!r}; "
            "use 'SSL' or 'SASL_SSL' to speak TLS"
        )
    if protocol.startswith("SASL_"):
        mechanism = checked.get("sasl_mechanism", "PLAIN")
        if mechanism == "OAUTHBEARER":
            needed = ["sasl_oauth_token_provider"]
        elif mechanism == "GSSAPI":
            needed = []
            if importlib.util.find_spec("gssapi") is None:
                # aiokafka would fail an assertion in its constructor instead.
                raise ConfigurationError(
                    "kafka_options: SASL GSSAPI needs the gssapi package (pip install gssapi)"
                )
        else:
            needed = ["sasl_plain_username", "sasl_plain_password"]
        missing = [key for key in needed if key not in checked]
        if missing:
            raise ConfigurationError(
                f"kafka_options: SASL {mechanism} needs {' and '.join(missing)}"
            )
    return checked


class KafkaOptions(dict[str, Any]):
    """Validated Kafka connection options, with aiokafka's names: a dict to pass as
    ``kafka_options=`` to [ConsumerGroup][aio_cluster.ConsumerGroup], or as ``**options`` to an
    aiokafka client.

    Accepted: ``security_protocol``, ``ssl_context``, ``sasl_mechanism``,
    ``sasl_plain_username``, ``sasl_plain_password``, ``sasl_kerberos_service_name``,
    ``sasl_kerberos_domain_name``, ``sasl_oauth_token_provider``, ``request_timeout_ms``,
    ``connections_max_idle_ms``, ``metadata_max_age_ms``, ``retry_backoff_ms``. With
    ``security_protocol`` ``"SSL"`` or ``"SASL_SSL"`` and no ``ssl_context``, one trusting the
    system's certificate authorities is made. Its repr shows secrets as ``'***'``.
    """

    def __init__(self, options: Mapping[str, Any] | None = None, /, **more: Any) -> None:
        """Check the options.

        Raises:
            ConfigurationError: an unknown key, a key the library sets itself (group, offset and
                fetch settings), a value of the wrong kind, or SASL without its credentials; the
                message lists the accepted keys and never shows a secret.
        """
        super().__init__(_validate({**(options or {}), **more}))

    @classmethod
    def from_pairs(cls, pairs: Iterable[str], *, ssl_cafile: str | None = None) -> KafkaOptions:
        """Options from ``KEY=VALUE`` texts, as a command line takes them (``--kafka-option``).

        Numbers are converted; ``ssl_context`` and ``sasl_oauth_token_provider`` cannot be given
        as text: ``ssl_cafile`` makes the context (and implies ``security_protocol=SSL`` unless
        another TLS protocol is given).

        Args:
            pairs: texts like ``"security_protocol=SASL_SSL"``.
            ssl_cafile: a PEM file of the certificate authorities to trust (``--ssl-cafile``).

        Raises:
            ConfigurationError: a text without ``=``, a key given twice, an unreadable CA file,
                or what [KafkaOptions][aio_cluster.KafkaOptions] refuses.
        """
        options: dict[str, Any] = {}
        for number, pair in enumerate(pairs, 1):
            key, sep, value = pair.partition("=")
            key = key.strip()
            if not sep or not key:
                raise ConfigurationError(f"kafka option {_unquoted(pair, number)} is not KEY=VALUE")
            if key in options:
                raise ConfigurationError(f"kafka option {key!r} is given twice")
            if key in ("ssl_context", "sasl_oauth_token_provider"):
                hint = "use --ssl-cafile" if key == "ssl_context" else "set it in code"
                raise ConfigurationError(f"kafka option {key!r} cannot be given as text: {hint}")
            options[key] = value
        if ssl_cafile is not None:
            options.setdefault("security_protocol", "SSL")
            try:
                options["ssl_context"] = ssl.create_default_context(cafile=ssl_cafile)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigurationError(
                    f"cannot read the CA file {ssl_cafile!r}: {exc.strerror or exc}"
                ) from exc
        return cls(options)

    def __repr__(self) -> str:
        shown = {key: _REDACTED if key in SECRET_KEYS else value for key, value in self.items()}
        return f"{type(self).__name__}({shown!r})"

    __str__ = __repr__

    def secrets(self) -> list[str]:
        """The secret texts these options hold (to scrub them from messages)."""
        return [
            value for key, value in self.items() if key in SECRET_KEYS and isinstance(value, str)
        ]


def _unquoted(pair: str, number: int) -> str:
    """A malformed ``KEY=VALUE`` text named without echoing it: it may hold a secret
    (``"sasl_plain_password hunter2"``). Only a known key at its start is shown."""
    words = pair.replace(":", " ").split()
    first = words[0] if words else ""
    if first in _ACCEPTED or first in _REFUSED:
        return f"{first!r} (number {number}; its value is not shown)"
    return f"number {number} (not shown: it may hold a secret)"


def parse_bootstrap(bootstrap: str | Sequence[str]) -> list[str]:
    """Validate Kafka bootstrap servers.

    Raises:
        ConfigurationError: empty, or a server without a numeric port in 1..65535.
    """
    return parse_servers(bootstrap, "Kafka")
