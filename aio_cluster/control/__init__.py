"""An operator's control of a running group: pauses, skips and stopped partitions.

An operator (``aio-cluster pause``, ``resume``, ``skip``, or the dashboard) writes what it wants
beside the group's nodes in ZooKeeper (the paths are in `aio_cluster.zookeeper.layout`); every
member watches it and obeys for the partitions it owns, and publishes the partitions that
``on_failure="stop"`` stopped, so that the operator can see which record to skip.

Modules::

    model.py   Pause, Skip, Stopped, ControlEvent, Controls: the data and its JSON (pure)
    store.py   ControlStore: reads and writes of a group's controls, with their history
"""
