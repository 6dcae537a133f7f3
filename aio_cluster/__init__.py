"""aio_cluster: self-balancing Kafka consumer groups for asyncio, coordinated through ZooKeeper.

The public surface is what ``__all__`` lists; every other module is an implementation detail,
except :mod:`aio_cluster.local`, the local single-node cluster for development and tests, and
:mod:`aio_cluster.testing`, the opt-in pytest plugin for users' suites.

Module map (one line per module; ``tests/test_exports.py`` checks it against the files)::

    __main__.py     ``python -m aio_cluster``: the aio-cluster command
    addresses.py    parsing "host:port" server lists
    assignment.py   the pure assignment strategies (sticky, range, round-robin)
    claiming.py     taking and releasing a partition's owner node in ZooKeeper
    claims.py       the Claim record the parts of a member share
    cli.py          the aio-cluster command: its arguments and I/O
    delivery.py     buffers, batches in flight, the round-robin pick, pause and seek
    errors.py       the error tree
    group.py        ConsumerGroup: the public facade composing the parts
    handover.py     a rebalance's handover: draining, the listener, new claims
    kafka.py        the only module that speaks Kafka (aiokafka in assign() mode)
    kafka_options.py  KafkaOptions: the validated connection options (TLS, SASL), secrets masked
    layout.py       the ZooKeeper paths and the data kept in them (pure)
    listener.py     RebalanceListener: hooks for assigned, revoked and lost partitions
    local/          the local ZooKeeper + Kafka for development and tests (TLS, SASL)
    membership.py   registration, members, the rebalance under the lock, making claims
    mirror.py       KafkaMirror: offsets stored in ZooKeeper committed to Kafka too
    offsets.py      stored offsets and the fenced transaction
    plans.py        lag rows and offset-reset plans for the command (pure)
    statistics.py   GroupStatistics: an immutable snapshot of a member
    sticky.py       the sticky target's node: reading it, publishing the next one
    survey.py       the command's ZooKeeper reads and its one-transaction offset write
    tables.py       the command's rich tables
    target.py       the published sticky target: the design, who leads (pure)
    testing.py      the opt-in pytest plugin: local_cluster, new_topic, produce
    tls.py          TLS handshakes that tell a refused certificate from a server away
    zk.py           the only module that speaks ZooKeeper (kazoo behind asyncio)
    zk_security.py  ZooKeeper credentials, ACLs and TLS settings; credentials masked in logs
"""

from .assignment import Strategy as Strategy
from .errors import AccessDeniedError as AccessDeniedError
from .errors import AioClusterError as AioClusterError
from .errors import AuthenticationError as AuthenticationError
from .errors import BrokerError as BrokerError
from .errors import ConfigurationError as ConfigurationError
from .errors import CoordinationError as CoordinationError
from .errors import CoordinationTimeout as CoordinationTimeout
from .errors import CorruptOffsetError as CorruptOffsetError
from .errors import GroupClosedError as GroupClosedError
from .errors import LocalClusterError as LocalClusterError
from .errors import NotOwnedError as NotOwnedError
from .errors import SessionLostError as SessionLostError
from .errors import StrategyMismatchError as StrategyMismatchError
from .group import Batch as Batch
from .group import ConsumerGroup as ConsumerGroup
from .group import GroupState as GroupState
from .kafka import Record as Record
from .kafka_options import KafkaOptions as KafkaOptions
from .listener import RebalanceListener as RebalanceListener
from .statistics import GroupStatistics as GroupStatistics
from .statistics import PartitionStatistics as PartitionStatistics
from .zk_security import ZooKeeperTLS as ZooKeeperTLS

__all__ = [
    "AccessDeniedError",
    "AioClusterError",
    "AuthenticationError",
    "Batch",
    "BrokerError",
    "ConfigurationError",
    "ConsumerGroup",
    "CoordinationError",
    "CoordinationTimeout",
    "CorruptOffsetError",
    "GroupClosedError",
    "GroupState",
    "GroupStatistics",
    "KafkaOptions",
    "LocalClusterError",
    "NotOwnedError",
    "PartitionStatistics",
    "RebalanceListener",
    "Record",
    "SessionLostError",
    "Strategy",
    "StrategyMismatchError",
    "ZooKeeperTLS",
]

__version__ = "0.1.0"
