"""One member's machinery behind the [ConsumerGroup][aio_cluster.ConsumerGroup] facade.

It drives the two server packages (`aio_cluster.zookeeper`, `aio_cluster.kafka`) and the
pure strategies (`aio_cluster.assign`); nothing below it imports it.

Modules::

    assignment.py    which partitions the assignment gives this member: targets, shares, turns
    claiming.py      owner nodes: claims under a fence epoch, releases, strays reconciled
    controls.py      MemberControls: an operator's pauses and skips obeyed, stops published
    delivery/        the partitions' states, and their batches fetched and handed out
    exactly_once.py  Transactions, Output: a partition's output and offsets in one Kafka transaction
    handover.py      a rebalance's handover: draining, the listener, new claims
    keyed_layout.py  KeyedLayout: the ZooKeeper paths of partition keys, over many topics
    lifecycle.py     GroupState: the stages of a member's life
    listener.py      RebalanceListener: hooks for assigned, revoked and lost partitions
    liveness.py      how long ZooKeeper has been silent, and what a member may still do
    member.py        Member: builds the parts from the configuration, owns the member's task
    membership.py    Membership: registration, topics and rebalance put together for Member
    mirror.py        KafkaMirror: offsets stored in ZooKeeper committed to Kafka too
    naming.py        PartitionNames: the user's int or TopicPartition to keys and back (pure)
    offsets.py       stored offsets and the fenced transaction
    processing/      the engine of process(): handlers at once, in key order, retried
    rebalance.py     the rebalance under the lock: the loop, releases and claims
    registration.py  this member's node, the name it holds, the members seen, the strategy
    statistics.py    GroupStatistics: an immutable snapshot of a member
    target_node.py   the sticky target's node: reading it, publishing the next one
    topics.py        the topics and partitions a member reads now, and when they changed
"""
