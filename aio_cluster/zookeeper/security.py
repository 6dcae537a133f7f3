"""ZooKeeper security settings, checked before any connection: digest credentials, the ACL the
group's nodes are created with, TLS, and the logger kazoo gets (one that masks credentials: kazoo
logs its requests at DEBUG, the authentication request with the password in it). Pure: no I/O.
"""

from __future__ import annotations

import logging
import re
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from kazoo.security import ACL, Id, Permissions

from ..errors import ConfigurationError

__all__ = [
    "Acl",
    "ZooKeeperTLS",
    "checked_auth",
    "client_context",
    "default_acl",
    "kazoo_log",
    "kazoo_tls_arguments",
    "shared_acl",
]


@dataclass(frozen=True)
class ZooKeeperTLS:
    """How to speak TLS to ZooKeeper (its ``secureClientPort``); kazoo makes the connection.

    Attributes:
        ca: a PEM file of the certificate authorities to trust; None: the system's.
        certfile: this client's certificate (PEM), for servers that ask for one.
        keyfile: the key of ``certfile`` (PEM).
        keyfile_password: the key's password, if it is encrypted (never shown in a repr).
        verify_certs: check the server's certificate; turn off only for experiments.
        check_hostname: check that the certificate names the host connected to.
    """

    ca: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    keyfile_password: str | None = field(default=None, repr=False)
    verify_certs: bool = True
    check_hostname: bool = False


Acl = Literal["open", "creator"]
_ACLS = ("open", "creator")
_AUTH_SCHEMES = ("digest",)


def checked_auth(auth: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The credentials, each ``(scheme, credential)`` checked; the error never shows a secret."""
    checked = []
    entries: Sequence[object] = auth  # checked as what a caller may really pass
    for index, entry in enumerate(entries):
        if not (isinstance(entry, tuple) and len(entry) == 2):
            raise ConfigurationError(
                f"zookeeper_auth[{index}] must be a (scheme, credential) pair, "
                f"not a {type(entry).__name__}"
            )
        scheme, credential = entry
        if scheme not in _AUTH_SCHEMES:
            raise ConfigurationError(
                f"zookeeper_auth[{index}] has scheme {scheme!r}; use one of "
                f"{', '.join(_AUTH_SCHEMES)}"
            )
        text = credential if isinstance(credential, str) else ""
        user, sep, _password = text.partition(":")
        if not (sep and user):
            raise ConfigurationError(
                f'zookeeper_auth[{index}]: a digest credential is "user:password"'
            )
        checked.append((scheme, credential))
    return checked


def default_acl(acl: str, auth: Sequence[tuple[str, str]]) -> list[Any] | None:
    """kazoo's default ACL for ``acl``: None keeps the server's open one."""
    if acl not in _ACLS:
        raise ConfigurationError(f"zookeeper_acl={acl!r}; use one of {', '.join(_ACLS)}")
    if acl == "open":
        return None
    if not auth:
        raise ConfigurationError(
            'zookeeper_acl="creator" needs zookeeper_auth: the nodes belong to its identity'
        )
    # "auth" stands for every identity the session authenticated as; the world may only read.
    return [ACL(Permissions.ALL, Id("auth", "")), ACL(Permissions.READ, Id("world", "anyone"))]


def shared_acl() -> list[Any]:
    """The creator ACL of a parent other identities create their own nodes under
    (``/consumers``): anyone may also create children, only the creator may delete them."""
    return [
        ACL(Permissions.ALL, Id("auth", "")),
        ACL(Permissions.READ | Permissions.CREATE, Id("world", "anyone")),
    ]


_SECRETS_IN_LOG = re.compile(
    # An Auth request's credential: auth='user:password'.
    r"(auth=)(['\"]).*?\2"
    # The session password, as the repr of bytes in a Connect request or its answer
    # (passwd=b'...'), or hexlified where kazoo reports the session (session_passwd: b'...').
    r"|(passwd=|session_passwd: )b(?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
)


def _masked(match: re.Match[str]) -> str:
    if match.group(1) is not None:
        return f"{match.group(1)}{match.group(2)}***{match.group(2)}"
    return f"{match.group(3)}b'***'"


class _MaskCredentials(logging.Filter):
    """Masks the secrets in kazoo's log: the credential of ``Auth(...)`` requests, and the
    session password (anyone holding it with the session id can take the session over) that
    kazoo logs in the ``Connect(...)`` request and answer, and when a session is created."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = _SECRETS_IN_LOG.sub(_masked, message)
        if masked != message:
            record.msg, record.args = masked, ()
        return True


kazoo_log = logging.getLogger("kazoo.client.aio_cluster")
"""The logger given to kazoo: a child of kazoo's own, so its configuration applies."""
kazoo_log.addFilter(_MaskCredentials())


def client_context(tls: ZooKeeperTLS) -> ssl.SSLContext:
    """An SSL context as kazoo makes one from ``tls`` (for a diagnosing handshake)."""
    context = ssl.create_default_context(cafile=tls.ca)
    context.check_hostname = tls.check_hostname
    context.verify_mode = ssl.CERT_REQUIRED if tls.verify_certs else ssl.CERT_NONE
    if tls.certfile is not None:
        context.load_cert_chain(tls.certfile, tls.keyfile, tls.keyfile_password)
    return context


def kazoo_tls_arguments(tls: ZooKeeperTLS) -> dict[str, Any]:
    """`KazooClient`'s keyword arguments that make it speak TLS as ``tls`` says.

    Raises:
        ConfigurationError: ``check_hostname`` without ``verify_certs``: a host name is checked
            against the verified certificate (kazoo would fail on its connection thread).
    """
    if tls.check_hostname and not tls.verify_certs:
        raise ConfigurationError(
            "ZooKeeperTLS(check_hostname=True) needs verify_certs=True: the host name is checked "
            "against the verified certificate"
        )
    return {
        "use_ssl": True,
        "ca": tls.ca,
        "certfile": tls.certfile,
        "keyfile": tls.keyfile,
        "keyfile_password": tls.keyfile_password,
        "verify_certs": tls.verify_certs,
        "check_hostname": tls.check_hostname,
    }
