"""One member's machinery behind the [ConsumerGroup][aio_cluster.ConsumerGroup] facade.

It drives the two server packages (`aio_cluster.zookeeper`, `aio_cluster.kafka`) and the
pure strategies (`aio_cluster.assign`); nothing below it imports it.

Modules::

    claiming.py     owner nodes: claims under a fence epoch, releases, strays reconciled
    claims.py       the Claim record the parts of a member share
    delivery.py     buffers, batches in flight, the round-robin pick, pause and seek
    handover.py     a rebalance's handover: draining, the listener, new claims
    lifecycle.py    GroupState: the stages of a member's life
    listener.py     RebalanceListener: hooks for assigned, revoked and lost partitions
    liveness.py     how long ZooKeeper has been silent, and what a member may still do
    membership.py   registration, members, the rebalance under the lock, making claims
    mirror.py       KafkaMirror: offsets stored in ZooKeeper committed to Kafka too
    offsets.py      stored offsets and the fenced transaction
    partitions.py   PartitionStates: every partition's state and its legal transitions (pure)
    processing.py   Processor: many records in flight, in key order, retries, dead letters
    statistics.py   GroupStatistics: an immutable snapshot of a member
    target_node.py  the sticky target's node: reading it, publishing the next one
    topics.py       KeyedLayout: the ZooKeeper paths of partition keys, over many topics
"""
