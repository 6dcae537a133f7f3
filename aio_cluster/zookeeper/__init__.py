"""The only package that speaks ZooKeeper, and the layout of a group's nodes in it.

Nothing here imports Kafka or a member; below it are only the error tree, `aio_cluster.net`
and the pure `aio_cluster.assign` whose values the layout encodes.

Modules::

    client.py       ZooKeeper: kazoo behind an asyncio facade, its errors translated
    failures.py     kazoo's failures mapped onto the library's error tree
    layout.py       the paths of a group's nodes and the data kept in them (pure)
    roster.py       the registrations a leader last read, in one node for newcomers (pure)
    seams.py        what the adapter needs of kazoo beyond its documented interface, checked
    security.py     credentials, ACLs and TLS settings; credentials masked in logs
    threads.py      kazoo's thread handler, cheap for many small calls: poll, no extra hop
    values.py       session states, a node's stat, transaction steps: what the client speaks (pure)
"""
