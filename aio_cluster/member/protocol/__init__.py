"""The group protocol over ZooKeeper: a member's registration, the topics it reads, the
assignment, its claims under their fences, the rebalance and its handover, the stored offsets.

`GroupPlace` (membership.py) puts registration, topics and rebalance together for the member;
the handover drives the delivery (`aio_cluster.member.delivery`) around each claim made or
released. It imports the servers' packages, `aio_cluster.assign`, the errors, the telemetry's
types and the delivery; never the processing engine (`aio_cluster.member.processing`) nor the
member above.

Modules::

    assignment.py    which partitions the assignment gives this member: targets, shares, turns
    claiming.py      owner nodes: claims under a fence epoch, releases, strays reconciled
    handover.py      a rebalance's handover: draining, the listener, new claims
    keyed_layout.py  KeyedLayout: the ZooKeeper paths of partition keys, over many topics
    listener.py      RebalanceListener: hooks for assigned, revoked and lost partitions
    liveness.py      how long ZooKeeper has been silent, and what a member may still do
    marks.py         Marker, MarkReader: this member's mark of what it cannot read, the group's
    membership.py    GroupPlace: registration, topics and rebalance put together for Member
    mirror.py        KafkaMirror: offsets stored in ZooKeeper committed to Kafka too
    offsets.py       stored offsets and the fenced transaction
    rebalance.py     the rebalance under the lock: the loop, releases and claims
    registration.py  this member's node, the name it holds, the members seen, the strategy
    target_node.py   the sticky target's node: reading it, publishing the next one
    topics.py        the topics and partitions a member reads now, and when they changed
"""
