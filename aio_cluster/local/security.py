"""TLS and SASL for the local cluster: a certificate authority made at start, the broker's PEM key
store, the listener settings, and the SCRAM user written into the storage at format time.

The broker keeps a plaintext listener of its own for the traffic between its broker and controller
parts (``INTERNAL``, on 127.0.0.1); clients only learn the secured listener they bootstrap from.
ZooKeeper, when asked, also serves TLS on a ``secureClientPort`` next to its plain port (which the
readiness probe and the fault hooks keep using).

With SASL, Kafka's ``StandardAuthorizer`` decides what each user may do: the cluster's own
principals are super users (the SCRAM user made at start, and ``ANONYMOUS``: the principal of the
plaintext listeners between the broker and controller parts, which the tools of `acls` use too);
any other user may do only what its ACLs allow.
"""

from __future__ import annotations

import secrets
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LocalClusterError
from ..kafka.options import KafkaOptions
from ..zookeeper.security import ZooKeeperTLS
from .config import HOST

__all__ = ["Security"]

SASL_MECHANISM = "SCRAM-SHA-512"
SASL_USER = "aio-cluster"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SUPER_USERS = ("ANONYMOUS", SASL_USER)
"""The principals the authorizer lets do anything: the plaintext listeners' (between nodes, never
told to clients) and the SCRAM user of `kafka_options`."""
_INTERNAL = "INTERNAL"


@dataclass(frozen=True)
class Security:
    """What a secured local cluster needs, made once per start.

    Attributes:
        directory: where the CA certificate and the servers' key store are written.
        sasl: SASL SCRAM-SHA-512 over TLS instead of TLS alone.
        password: the SCRAM user's password, random per start (never shown in a repr).
    """

    directory: Path
    sasl: bool
    context: ssl.SSLContext = field(repr=False)
    password: str = field(repr=False)

    @classmethod
    def create(cls, directory: Path, *, sasl: bool) -> Security:
        """Make a CA and a certificate for 127.0.0.1 signed by it, and write the files.

        Raises:
            LocalClusterError: trustme is not installed (the ``local-tls`` extra).
        """
        try:
            import trustme  # noqa: PLC0415 (optional: only secured clusters need it)
            from cryptography.hazmat.primitives import serialization  # noqa: PLC0415
        except ImportError as exc:
            raise LocalClusterError(
                "LocalCluster(tls=True) needs trustme: pip install 'aio-cluster[local-tls]'"
            ) from exc
        authority = trustme.CA()
        leaf = authority.issue_cert(HOST, "localhost")
        key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), password=None)
        # Kafka and ZooKeeper read PEM key stores with the key in PKCS#8 only.
        pkcs8 = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        directory.mkdir(parents=True, exist_ok=True)
        keystore = directory / "server.pem"
        keystore.touch(mode=0o600)
        keystore.write_bytes(pkcs8 + b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
        authority.cert_pem.write_to_path(str(directory / "ca.pem"))
        context = ssl.create_default_context(cafile=str(directory / "ca.pem"))
        return cls(directory, sasl, context, secrets.token_urlsafe(24))

    @property
    def protocol(self) -> str:
        """The client listener's security protocol."""
        return "SASL_SSL" if self.sasl else "SSL"

    @property
    def ca_file(self) -> Path:
        """The PEM certificate of the CA that signed the servers' certificate."""
        return self.directory / "ca.pem"

    @property
    def kafka_options(self) -> KafkaOptions:
        """Options for a client of the secured listener (a context trusting the CA)."""
        options: dict[str, object] = {
            "security_protocol": self.protocol,
            "ssl_context": self.context,
        }
        if self.sasl:
            options.update(
                sasl_mechanism=SASL_MECHANISM,
                sasl_plain_username=SASL_USER,
                sasl_plain_password=self.password,
            )
        return KafkaOptions(options)

    @property
    def zookeeper_tls(self) -> ZooKeeperTLS:
        """How a client speaks TLS to ZooKeeper's secure port."""
        return ZooKeeperTLS(ca=str(self.ca_file))

    def kafka_properties(
        self, *, listen_host: str, port: int, internal_port: int, controller_port: int
    ) -> dict[str, str]:
        """The listener settings that replace the plaintext ones of the broker."""
        client = self.protocol
        properties = {
            "listeners": f"{client}://{listen_host}:{port},{_INTERNAL}://{HOST}:{internal_port},"
            f"CONTROLLER://{HOST}:{controller_port}",
            "advertised.listeners": f"{client}://{HOST}:{port},{_INTERNAL}://{HOST}:{internal_port}",
            "inter.broker.listener.name": _INTERNAL,
            "listener.security.protocol.map": f"CONTROLLER:PLAINTEXT,{_INTERNAL}:PLAINTEXT,"
            f"{client}:{client}",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.directory / "server.pem"),
        }
        if self.sasl:
            properties["sasl.enabled.mechanisms"] = SASL_MECHANISM
            properties["authorizer.class.name"] = AUTHORIZER
            properties["super.users"] = ";".join(f"User:{user}" for user in SUPER_USERS)
        return properties | self.listener_properties(client)

    def listener_properties(self, name: str) -> dict[str, str]:
        """What a client listener named ``name`` needs beyond its protocol: a SASL one the
        SCRAM login module (Kafka takes it per listener)."""
        if not self.sasl:
            return {}
        return {
            f"listener.name.{name.lower()}.{SASL_MECHANISM.lower()}.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            )
        }

    def format_arguments(self) -> list[str]:
        """Arguments of Kafka's storage format that create the SCRAM user (KRaft keeps SCRAM
        credentials in its metadata log)."""
        if not self.sasl:
            return []
        return ["--add-scram", f"{SASL_MECHANISM}=[name={SASL_USER},password={self.password}]"]

    def zookeeper_config(self, secure_port: int) -> dict[str, str]:
        """Settings that make ZooKeeper serve TLS on ``secure_port`` too."""
        return {
            "serverCnxnFactory": "org.apache.zookeeper.server.NettyServerCnxnFactory",
            "secureClientPort": str(secure_port),
            "secureClientPortAddress": HOST,
            "ssl.keyStore.location": str(self.directory / "server.pem"),
            "ssl.keyStore.type": "PEM",
            "ssl.trustStore.location": str(self.ca_file),
            "ssl.trustStore.type": "PEM",
            "ssl.clientAuth": "none",
        }
