"""Why a Kafka client could not start: a refused TLS handshake or refused credentials (not worth
retrying), or a broker that is merely away.

aiokafka logs why each server failed and raises only "unable to bootstrap"; one connection more,
opened here, tells the cases apart and names the server.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Sequence

from aiokafka.conn import create_conn
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)
from aiokafka.protocol.metadata import MetadataRequest

from ..errors import AuthenticationError, BrokerError
from ..net.tls import speaks_tls
from .options import KafkaOptions

__all__ = ["connect_failure", "named"]

_CONNECTION_KEYS = frozenset(
    {
        "request_timeout_ms",
        "ssl_context",
        "security_protocol",
        "sasl_mechanism",
        "sasl_plain_username",
        "sasl_plain_password",
        "sasl_kerberos_service_name",
        "sasl_kerberos_domain_name",
        "sasl_oauth_token_provider",
    }
)
"""The options that shape one connection (what ``create_conn`` takes); the others
(``retry_backoff_ms``, ``metadata_max_age_ms``, ...) concern a client's many connections."""


def named(exc: BaseException) -> str:
    """An aiokafka error in a few words: its name, and its cause's (its messages run long)."""
    cause = exc.__cause__
    return type(exc).__name__ + ("" if cause is None else f" ({type(cause).__name__})")


async def connect_failure(
    servers: Sequence[str], options: KafkaOptions, client_id: str, exc: KafkaError
) -> AuthenticationError | BrokerError:
    """The error to raise for an aiokafka client that could not start (``exc``).

    aiokafka logs why each server failed and raises only "unable to bootstrap"; one connection
    more tells a refused TLS handshake or refused credentials from a broker that is away.
    """
    refused = await _diagnose(servers, options, client_id)
    if refused is not None:
        return refused
    return BrokerError(f"could not reach Kafka at {','.join(servers)}: {_scrub(exc, options)}")


def _scrub(exc: BaseException, options: KafkaOptions) -> str:
    """An error's text with the options' secrets masked."""
    text = str(exc)
    for secret in options.secrets():
        text = text.replace(secret, "***")
    return text


async def _diagnose(
    servers: Sequence[str], options: KafkaOptions, client_id: str
) -> AuthenticationError | None:
    """Connect to each server once more, to name a security failure as such.

    Returns:
        The error for the first server that refused the TLS handshake or the credentials, or
        whose listener speaks TLS to a plaintext client; None when no server did (it is away).
    """
    protocol = str(options.get("security_protocol", "PLAINTEXT"))
    timeout_ms = int(options["request_timeout_ms"])
    connection = {key: value for key, value in options.items() if key in _CONNECTION_KEYS}
    for server in servers:
        host, _, port = server.rpartition(":")
        try:
            conn = await create_conn(host, int(port), client_id=client_id, **connection)
        except ssl.SSLError as exc:
            reason = exc.reason or type(exc).__name__
            return AuthenticationError(
                f"the TLS handshake with Kafka {server} failed ({reason}): the server's "
                f"certificate is not trusted by the ssl_context, or {server} does not speak TLS"
            )
        except (SaslAuthenticationFailed, UnsupportedSaslMechanismError) as exc:
            mechanism = options.get("sasl_mechanism", "PLAIN")
            user = options.get("sasl_plain_username")
            who = f" of user {user!r}" if user is not None else ""
            return AuthenticationError(
                f"Kafka {server} refused the SASL {mechanism} credentials{who}: "
                f"{_scrub(exc, options)}"
            )
        except (OSError, KafkaError, asyncio.TimeoutError):
            if protocol in ("PLAINTEXT", "SASL_PLAINTEXT") and await speaks_tls(
                host, int(port), timeout_ms / 1000
            ):
                return AuthenticationError(
                    f"Kafka {server} expects TLS, but security_protocol is {protocol!r}: use "
                    "'SSL' or 'SASL_SSL' with an ssl_context that trusts the server"
                )
            continue
        try:
            # A listener that wants SASL answers the version look-up, then closes on a request.
            await conn.send(MetadataRequest([]))
        except KafkaConnectionError:
            if not protocol.startswith("SASL_"):
                return AuthenticationError(
                    f"Kafka {server} closed the connection on a request without SASL "
                    f"authentication: security_protocol is {protocol!r}; it probably expects "
                    "'SASL_SSL' (or 'SASL_PLAINTEXT') with credentials"
                )
        except (KafkaError, asyncio.TimeoutError):
            pass
        finally:
            conn.close()
    return None
