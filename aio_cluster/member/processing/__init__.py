"""The processing engine: ``process()`` and ``process_bulk()``, many records of the claimed
partitions in handlers at once, in key order, with retries and a policy for records that fail.

It takes its batches from the delivery (`aio_cluster.member.delivery`) and tells it how far each
got; besides that it imports only the configuration, the errors, `aio_cluster.kafka` (records,
dead letters) and the telemetry's types. It knows nothing of ZooKeeper or of the group protocol
(`aio_cluster.member.protocol`), and nothing here imports the member that builds it.

Modules::

    bounds.py     bounded(): a handler's attempt cut at attempt_timeout
    bulk.py       BulkCalls: a bulk handler as process()'s per-record handler, calls split
    eager.py      resumed(): a coroutine stepped once by hand, then awaited as it was
    failures.py   Retries: a failed record's retries and its dead letter, for process()
    outcomes.py   what a handler's end means in process(): the key's next, retries, policy
    processor.py  Processor: process()'s batches taken, grown, told and settled
    windows.py    process()'s running batches: which records may start, the prefix (pure)
    workers.py    Workers: process()'s tasks that run the handlers, the hot path
"""
