"""The only package that speaks Kafka: aiokafka clients in manual ``assign()`` mode.

No Kafka consumer group is used: ZooKeeper decides who owns which partition, and this package only
fetches from the partitions it is told to, from the offsets it is told to. Topic metadata comes
from Kafka's metadata API (KRaft brokers write nothing into ZooKeeper). aiokafka's errors are
translated into `aio_cluster.errors` here, and nothing here imports ZooKeeper or a member.

Modules::

    budget.py          FetchBudget: the bytes the fetches may buffer, over all partitions (pure)
    dead_letters.py    DeadLetters: failed records written to a dead-letter topic, idempotently
    decoding.py        Decoder: keys and values through the deserializers, a failure named exactly
    diagnosis.py       why a client could not connect: a refused handshake or credentials, or away
    fetch_sessions.py  FetchSessions: incremental fetch sessions (KIP-227) for aiokafka's fetches
    fetcher.py         Fetcher: records of one or many topics, from the partitions it is told
    group_offsets.py   KafkaGroupOffsets: a group's offsets in Kafka's __consumer_offsets
    list_offsets.py    ListOffsets: offsets asked of the partitions' leaders, never behind a fetch
    look_ups.py        LookUps: the look-ups running on each reader, so a reader closes after them
    metadata.py        CompactMetadata: a client's topic metadata, kept out of the collector's way
    offset_reader.py   OffsetReader: partitions, log bounds and offsets at a time, never records
    options.py         KafkaOptions: the validated connection options (TLS, SASL), secrets masked
    placement.py       the racks of each partition's replicas, from Kafka's metadata (pure)
    progress.py        ReadProgress: whether each partition fetched makes progress (pure)
    read_probe.py      ReadProbe: whether the leaders let this client read, asked with a Fetch
    records.py         Record: one record as the library hands it out
    restarts.py        Restarts: how often aiokafka's background fetch may end before giving up
    seams.py           every private name of aiokafka used, checked at start, each with a fallback
    topics.py          TopicPartition, and the keys (PartitionKey) of many topics' partitions (pure)
    transactions.py    PartitionProducer: one input partition's transactional producer (fences)
    unreadable.py      isolate(): the partition behind a fetch error that fetching again won't mend
"""
