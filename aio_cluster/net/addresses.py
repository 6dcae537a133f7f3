"""Server addresses as users write them: ``"host:port"``, alone, in lists or comma-separated.

Pure parsing, shared by the Kafka and the ZooKeeper adapter, so both refuse the same bad input with
the same kind of message.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ConfigurationError

__all__ = ["parse_servers"]


def parse_servers(servers: str | Sequence[str], service: str) -> list[str]:
    """Split and validate ``"h1:p1,h2:p2"`` (or a list of ``"host:port"``).

    Args:
        servers: the addresses.
        service: who they are for ("Kafka", "ZooKeeper"), named in the error.

    Returns:
        The addresses, stripped, in their order.

    Raises:
        ConfigurationError: none given, or one without a host and a decimal port in 1..65535.
    """
    text = servers if isinstance(servers, str) else ",".join(servers)
    found = [server.strip() for server in text.split(",") if server.strip()]
    if not found:
        raise ConfigurationError(f"{service} servers {text!r} name no server")
    for server in found:
        host, sep, port = server.rpartition(":")
        if not (sep and host and port.isascii() and port.isdigit() and 0 < int(port) < 65536):
            raise ConfigurationError(f"{service} server {server!r} in {text!r} is not host:port")
    return found
