"""aio_cluster: self-balancing Kafka consumer groups for asyncio, coordinated through ZooKeeper.

The public surface is what ``__all__`` lists; every other module is an implementation detail,
except :mod:`aio_cluster.local`, the local single-node cluster for development and tests.

Module map (one line per module; ``tests/test_exports.py`` checks it against the files)::

    addresses.py    parsing "host:port" server lists
    assignment.py   the pure assignment strategies (sticky, range, round-robin)
    claiming.py     taking and releasing a partition's owner node in ZooKeeper
    claims.py       the Claim record the parts of a member share
    delivery.py     buffers, batches in flight, the round-robin pick, pause and seek
    errors.py       the error tree
    group.py        ConsumerGroup: the public facade composing the parts
    handover.py     a rebalance's handover: draining, the listener, new claims
    kafka.py        the only module that speaks Kafka (aiokafka in assign() mode)
    layout.py       the ZooKeeper paths and the data kept in them (pure)
    listener.py     RebalanceListener: hooks for assigned, revoked and lost partitions
    local.py        the local single-node ZooKeeper + Kafka for development and tests
    membership.py   registration, members, the rebalance under the lock, making claims
    offsets.py      stored offsets and the fenced transaction
    statistics.py   GroupStatistics: an immutable snapshot of a member
    sticky.py       the sticky target's node: reading it, publishing the next one
    target.py       the published sticky target: the design, who leads (pure)
    zk.py           the only module that speaks ZooKeeper (kazoo behind asyncio)
"""

from .assignment import Strategy as Strategy
from .errors import AioClusterError as AioClusterError
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
from .listener import RebalanceListener as RebalanceListener
from .statistics import GroupStatistics as GroupStatistics
from .statistics import PartitionStatistics as PartitionStatistics

__all__ = [
    "AioClusterError",
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
    "LocalClusterError",
    "NotOwnedError",
    "PartitionStatistics",
    "RebalanceListener",
    "Record",
    "SessionLostError",
    "Strategy",
    "StrategyMismatchError",
]

__version__ = "0.1.0"
