"""One member's machinery behind the [ConsumerGroup][aio_cluster.ConsumerGroup] facade.

It drives the two server packages (`aio_cluster.zookeeper`, `aio_cluster.kafka`) and the
pure strategies (`aio_cluster.assign`); nothing below it imports it.

Three machines, each a subpackage, under the modules that join them; each imports only what
stands below it (``tests/test_exports.py`` checks it)::

    the member     member.py, assembly.py, iterations.py, processes.py, controls.py,
                   exactly_once.py, naming.py, statistics.py, lifecycle.py, stuck.py
    the protocol   protocol/: the group over ZooKeeper (registration, claims, rebalance, offsets)
    the engine     processing/: process() and process_bulk(), handlers at once, in key order
    the delivery   delivery/: the partitions' states, their batches fetched and handed out

The protocol and the engine stand side by side on the delivery, and neither imports the other.

Modules::

    assembly.py      Parts: the member's parts built from the configuration, hooks given as made
    controls.py      MemberControls: an operator's pauses and skips obeyed, stops published
    delivery/        the partitions' states, and their batches fetched and handed out
    exactly_once.py  Transactions, Output: a partition's output and offsets in one Kafka transaction
    iterations.py    Iterations: batches handed to a loop body, async for and transactions()
    lifecycle.py     GroupState: the stages of a member's life
    member.py        Member: the facade's one door; its life: the member's task and its closing
    naming.py        PartitionNames: the user's int or TopicPartition to keys and back (pure)
    processes.py     Processes: process(), process_bulk(), process_transactional(), one at a time
    processing/      the engine of process(): handlers at once, in key order, retried
    protocol/        the group protocol over ZooKeeper: registration, claims, rebalance
    statistics.py    GroupStatistics: an immutable snapshot of a member
    stuck.py         StuckWatch: handlers and batch bodies past stuck_after, logged and published
"""
