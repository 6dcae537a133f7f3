"""The delivery of batches: every claimed partition's state, and its records fetched and handed out.

The ground floor of a member: the claim record, the partitions' states and their legal transitions
(with three parts of their own: the fetcher's side, the offsets' ladder, the listener's
announcements), the notes of records finished past a stored offset, and the driver between those
states and the Kafka fetcher. It imports only `aio_cluster.errors` and `aio_cluster.kafka`: the
group protocol (`aio_cluster.member.protocol`) and the processing engine
(`aio_cluster.member.processing`) build on it, and nothing here imports them or the member.

Modules::

    announcements.py  what the rebalance listener was told of the partitions (pure)
    claims.py         the Claim record the parts of a member share
    commits.py        each claim's start, and its offsets ready, pending and stored (pure)
    delivery.py       Delivery: buffers, batches in flight, the round-robin pick, pause and seek
    feed.py           the fetcher's side of each partition: its claim, seeks, gaps met (pure)
    finished.py       notes of records finished past the stored offset, passed over after it
    partitions.py     PartitionStates: every partition's state and its legal transitions (pure)
"""
