"""The servers an operator's tool speaks to and how to reach them: a `Connection`, made from
what the command line (or the dashboard's caller) named and the ``AIO_CLUSTER_*`` variables for
what it did not. ZooKeeper's credentials never come from the command line: from a file or the
environment only, and an error names where a bad one came from, never what it holds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import cast

from ..config import ZooKeeperSecurity
from ..errors import ConfigurationError
from ..kafka.options import KafkaOptions
from ..zookeeper.security import Acl, ZooKeeperTLS
from .environment import (
    ACL_VAR,
    AUTH_VAR,
    BOOTSTRAP_VAR,
    CAFILE_VAR,
    CERTFILE_VAR,
    KEY_PASSWORD_VAR,
    KEYFILE_VAR,
    TLS_VAR,
    ZOOKEEPER_VAR,
    env,
)

__all__ = ["Connection", "ZooKeeperFlags", "resolve_connection"]


@dataclass(frozen=True, slots=True)
class Connection:
    """The servers of every subcommand but ``local``, and how to reach them.

    Attributes:
        bootstrap: ``--bootstrap`` or ``$AIO_CLUSTER_BOOTSTRAP``; None: neither (an error only
            for a subcommand that speaks to Kafka, see `bootstrap_address`).
        zookeeper: ``--zookeeper`` or ``$AIO_CLUSTER_ZOOKEEPER``; None: neither.
        timeout: ``--timeout``: seconds to wait for a server, positive.
        kafka: ``--kafka-option`` and ``--ssl-cafile``, validated.
        security: the credentials, ACL and TLS of the ZooKeeper session.
    """

    bootstrap: str | None
    zookeeper: str | None
    timeout: float
    kafka: KafkaOptions
    security: ZooKeeperSecurity

    def bootstrap_address(self) -> str:
        """The Kafka servers.

        Raises:
            ConfigurationError: none named.
        """
        return _named(self.bootstrap, BOOTSTRAP_VAR, "--bootstrap")

    def zookeeper_address(self) -> str:
        """The ZooKeeper servers.

        Raises:
            ConfigurationError: none named.
        """
        return _named(self.zookeeper, ZOOKEEPER_VAR, "--zookeeper")


@dataclass(frozen=True, slots=True)
class ZooKeeperFlags:
    """What the command line said of the ZooKeeper session's security, None (False) where it
    said nothing: ``--zookeeper-auth-file``, ``--zookeeper-acl``, ``--zookeeper-tls``,
    ``--zookeeper-cafile``, ``--zookeeper-certfile``, ``--zookeeper-keyfile``."""

    auth_file: str | None = None
    acl: str | None = None
    tls: bool = False
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None


def resolve_connection(
    bootstrap: str | None,
    zookeeper: str | None,
    timeout: float,
    kafka: KafkaOptions,
    flags: ZooKeeperFlags,
) -> Connection:
    """The connection of what was named, the environment's variables filling in the rest.

    Raises:
        ConfigurationError: a timeout that is not positive; credentials, an ACL or a TLS file
            that cannot be used (named by where they came from).
    """
    if not timeout > 0:
        raise ConfigurationError(f"--timeout must be positive, not {timeout}")
    return Connection(
        bootstrap=bootstrap or env(BOOTSTRAP_VAR),
        zookeeper=zookeeper or env(ZOOKEEPER_VAR),
        timeout=timeout,
        kafka=kafka,
        security=_zookeeper_security(flags),
    )


def _named(address: str | None, variable: str, option: str) -> str:
    if not address:
        raise ConfigurationError(f"no {option[2:]} address: pass {option} or set {variable}")
    return address


def _zookeeper_auth(auth_file: str | None) -> list[tuple[str, str]]:
    """The credentials of ``--zookeeper-auth-file`` or ``$AIO_CLUSTER_ZOOKEEPER_AUTH``; an error
    names where a malformed one came from, never what it holds."""
    if auth_file is not None:
        source = f"--zookeeper-auth-file {auth_file}"
        try:
            with open(auth_file, encoding="utf-8") as file:
                lines = [line.strip() for line in file]
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise ConfigurationError(f"cannot read {source}: {reason}") from None
        entries = [line for line in lines if line and not line.startswith("#")]
        if not entries:
            raise ConfigurationError(f"{source} holds no credentials")
    else:
        value = env(AUTH_VAR)
        if value is None:
            return []
        source, entries = f"${AUTH_VAR}", [value]
    auth = []
    for number, entry in enumerate(entries, 1):
        scheme, _sep, credential = entry.partition(":")
        user, sep, _password = credential.partition(":")
        if not (scheme and user and sep):
            where = source if len(entries) == 1 else f"{source} (credential {number})"
            raise ConfigurationError(f"{where} is not of the form digest:user:password")
        auth.append((scheme, credential))
    return auth


def _zookeeper_tls(flags: ZooKeeperFlags) -> ZooKeeperTLS | None:
    ca = flags.cafile or env(CAFILE_VAR)
    certfile = flags.certfile or env(CERTFILE_VAR)
    keyfile = flags.keyfile or env(KEYFILE_VAR)
    wanted = flags.tls or (env(TLS_VAR) or "0").lower() in ("1", "true", "yes")
    if not (wanted or ca or certfile or keyfile):
        return None
    for option, path in (
        ("--zookeeper-cafile", ca),
        ("--zookeeper-certfile", certfile),
        ("--zookeeper-keyfile", keyfile),
    ):
        if path is not None and not os.path.isfile(path):
            raise ConfigurationError(f"{option} {path}: no such file")
    return ZooKeeperTLS(
        ca=ca, certfile=certfile, keyfile=keyfile, keyfile_password=env(KEY_PASSWORD_VAR)
    )


def _zookeeper_security(flags: ZooKeeperFlags) -> ZooKeeperSecurity:
    """The credentials, ACL and TLS of the ZooKeeper session."""
    auth = _zookeeper_auth(flags.auth_file)
    acl = flags.acl or env(ACL_VAR) or ("creator" if auth else "open")
    if acl not in ("open", "creator"):
        raise ConfigurationError(f"${ACL_VAR}={acl!r}; use open or creator")
    if acl == "creator" and not auth:
        raise ConfigurationError(
            f"--zookeeper-acl creator needs credentials: set ${AUTH_VAR} or pass "
            "--zookeeper-auth-file"
        )
    tls = _zookeeper_tls(flags)
    return ZooKeeperSecurity(auth=auth, acl=cast(Acl, acl), tls=False if tls is None else tls)
