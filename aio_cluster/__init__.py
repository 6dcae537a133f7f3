"""aio_cluster: self-balancing Kafka consumer groups for asyncio, coordinated through ZooKeeper.

The public surface is what ``__all__`` lists; every other module is an implementation detail,
except `aio_cluster.local`, the local single-node cluster for development and tests,
`aio_cluster.metrics`, a member's figures for Prometheus, `aio_cluster.dashboard`, the live web
dashboard, and `aio_cluster.testing`, the opt-in pytest plugin for users' suites.

Layers, each importing only those below it (``tests/test_exports.py`` checks the map and the
layers)::

    the public face      __init__, group, errors       ConsumerGroup and the error tree
    the front ends       __main__, cli/, dashboard/    the aio-cluster command, the web dashboard
                                                       (side by side: __main__ joins them)
    operator tools       operator/                     looks, plans, health rules, control writes
    one member           member/                       the machinery behind the facade
    operator control     control/                      pauses, skips, stops: model and store
    telemetry            otel/                         spans and metrics through OpenTelemetry
    the configuration    config                        the options, checked, as value objects
    the servers          zookeeper/, kafka/            the only code that speaks each server
    pure logic, helpers  assign/, net/, concurrency    strategies and targets; addresses, TLS;
                                                       concurrent calls in anyio task groups

Module map (one line per module or folder; each folder's docstring maps its own modules)::

    __main__.py     the aio-cluster command, ``python -m aio_cluster``: cli/ and dashboard/ joined
    assign/         who should own what: the pure strategies and the published sticky target
    cli/            the aio-cluster command: its flags, options, printing, tables
    concurrency.py  the one way to wait and cancel: task groups; the tasks that outlive a call
    config.py       the configuration: Timing, Fetching, Membership, ZooKeeperSecurity, Processing
    control/        an operator's pauses and skips of a running group: the model, its store
    dashboard/      the live web dashboard of the groups (the ``dashboard`` extra)
    errors.py       the error tree
    group.py        ConsumerGroup: the public facade over a member
    kafka/          the only package that speaks Kafka: fetcher, offset reader, group offsets
    local/          the local ZooKeeper + Kafka for development and tests (TLS, SASL, multi-node)
    member/         one member's machinery: the group protocol, the delivery, the processing
    metrics.py      a member's figures for Prometheus (the ``metrics`` extra)
    net/            server addresses and TLS handshakes, shared by both server packages
    operator/       an operator's tools: looks at a group, reset and skip plans, health rules
    otel/           spans and metrics through OpenTelemetry (the ``otel`` extra)
    testing.py      the opt-in pytest plugin: local_cluster, new_topic, produce
    zookeeper/      the only package that speaks ZooKeeper, and the layout of its nodes
"""

from .assign.strategies import Strategy as Strategy
from .config import Fetching as Fetching
from .config import Membership as Membership
from .config import Processing as Processing
from .config import Timing as Timing
from .config import ZooKeeperSecurity as ZooKeeperSecurity
from .errors import AccessDeniedError as AccessDeniedError
from .errors import AioClusterError as AioClusterError
from .errors import AttemptTimeoutError as AttemptTimeoutError
from .errors import AuthenticationError as AuthenticationError
from .errors import BackgroundEndedError as BackgroundEndedError
from .errors import BrokerError as BrokerError
from .errors import ConfigurationError as ConfigurationError
from .errors import ControlConflictError as ControlConflictError
from .errors import ControlError as ControlError
from .errors import CoordinationError as CoordinationError
from .errors import CoordinationTimeout as CoordinationTimeout
from .errors import CorruptOffsetError as CorruptOffsetError
from .errors import DeserializationError as DeserializationError
from .errors import FetchError as FetchError
from .errors import FetchStalledError as FetchStalledError
from .errors import GroupClosedError as GroupClosedError
from .errors import HandlerCancelledError as HandlerCancelledError
from .errors import LocalClusterError as LocalClusterError
from .errors import MemberReplacedError as MemberReplacedError
from .errors import NotOwnedError as NotOwnedError
from .errors import OutputRefusedError as OutputRefusedError
from .errors import ProducerFencedError as ProducerFencedError
from .errors import ReadRefusedError as ReadRefusedError
from .errors import SessionLostError as SessionLostError
from .errors import SkipRefusedError as SkipRefusedError
from .errors import StrategyMismatchError as StrategyMismatchError
from .errors import TransactionClosedError as TransactionClosedError
from .errors import TransactionDeniedError as TransactionDeniedError
from .errors import UnreadableError as UnreadableError
from .group import Batch as Batch
from .group import ConsumerGroup as ConsumerGroup
from .group import GroupState as GroupState
from .group import Output as Output
from .kafka.options import KafkaOptions as KafkaOptions
from .kafka.records import Record as Record
from .kafka.topics import TopicPartition as TopicPartition
from .member.protocol.listener import RebalanceListener as RebalanceListener
from .member.statistics import GroupStatistics as GroupStatistics
from .member.statistics import PartitionStatistics as PartitionStatistics
from .zookeeper.security import ZooKeeperTLS as ZooKeeperTLS

__all__ = [
    "AccessDeniedError",
    "AioClusterError",
    "AttemptTimeoutError",
    "AuthenticationError",
    "BackgroundEndedError",
    "Batch",
    "BrokerError",
    "ConfigurationError",
    "ConsumerGroup",
    "ControlConflictError",
    "ControlError",
    "CoordinationError",
    "CoordinationTimeout",
    "CorruptOffsetError",
    "DeserializationError",
    "FetchError",
    "FetchStalledError",
    "Fetching",
    "GroupClosedError",
    "GroupState",
    "GroupStatistics",
    "HandlerCancelledError",
    "KafkaOptions",
    "LocalClusterError",
    "MemberReplacedError",
    "Membership",
    "NotOwnedError",
    "Output",
    "OutputRefusedError",
    "PartitionStatistics",
    "Processing",
    "ProducerFencedError",
    "ReadRefusedError",
    "RebalanceListener",
    "Record",
    "SessionLostError",
    "SkipRefusedError",
    "Strategy",
    "StrategyMismatchError",
    "Timing",
    "TopicPartition",
    "TransactionClosedError",
    "TransactionDeniedError",
    "UnreadableError",
    "ZooKeeperSecurity",
    "ZooKeeperTLS",
]

__version__ = "0.1.0"
