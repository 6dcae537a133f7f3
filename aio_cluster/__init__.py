"""aio_cluster: self-balancing Kafka consumer groups for asyncio, coordinated through ZooKeeper.

The public surface is what ``__all__`` lists; every other module is an implementation detail,
except :mod:`aio_cluster.local`, the local single-node cluster for development and tests.
"""

from .assignment import Strategy as Strategy
from .errors import AccessDeniedError as AccessDeniedError
from .errors import AioClusterError as AioClusterError
from .errors import AuthenticationError as AuthenticationError
from .errors import BrokerError as BrokerError
from .errors import ConfigurationError as ConfigurationError
from .errors import CoordinationError as CoordinationError
from .errors import CoordinationTimeout as CoordinationTimeout
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
    "GroupClosedError",
    "GroupState",
    "KafkaOptions",
    "LocalClusterError",
    "NotOwnedError",
    "Record",
    "SessionLostError",
    "Strategy",
    "StrategyMismatchError",
    "ZooKeeperTLS",
]

__version__ = "0.1.0"
