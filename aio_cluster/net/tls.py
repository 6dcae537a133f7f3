"""TLS handshakes as a diagnosis: when a client cannot connect, one handshake tells a refused
certificate, or a server that speaks TLS to a plaintext client, from a server that is away."""

from __future__ import annotations

import asyncio
import ssl

import anyio

__all__ = ["handshake_error", "speaks_tls"]


async def handshake_error(
    host: str, port: int, context: ssl.SSLContext, timeout: float
) -> ssl.SSLError | None:
    """Open a TLS connection and close it again.

    Returns:
        The handshake's error, or None when it succeeded.

    Raises:
        OSError, TimeoutError: no connection at all.
    """
    try:
        with anyio.fail_after(timeout):
            _reader, writer = await asyncio.open_connection(
                host, port, ssl=context, server_hostname=host
            )
    except ssl.SSLError as exc:
        return exc
    # Abort, not close: a TLS close waits for the server's close_notify, which may never come.
    writer.transport.abort()
    return None


async def speaks_tls(host: str, port: int, timeout: float) -> bool:
    """Whether the server completes a TLS handshake (its certificate is not checked: this only
    asks which language the listener speaks)."""
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    probe.check_hostname = False
    probe.verify_mode = ssl.CERT_NONE
    try:
        return await handshake_error(host, port, probe, timeout) is None
    except (OSError, asyncio.TimeoutError):
        return False
