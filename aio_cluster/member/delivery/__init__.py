"""The delivery of batches: every claimed partition's state, and its records fetched and handed out.

The ground floor of a member: the claim record, the partitions' states and their legal
transitions, the notes of records finished past a stored offset, and the driver between those
states and the Kafka fetcher. It imports only `aio_cluster.errors` and `aio_cluster.kafka`: the
group protocol (`aio_cluster.member.protocol`) and the processing engine
(`aio_cluster.member.processing`) build on it, and nothing here imports them or the member.

Modules::

    claims.py      the Claim record the parts of a member share
    delivery.py    Delivery: buffers, batches in flight, the round-robin pick, pause and seek
    finished.py    notes of records finished past the stored offset, passed over after it
    partitions.py  PartitionStates: every partition's state and its legal transitions (pure)
"""
