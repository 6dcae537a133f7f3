"""An operator's tools, beneath both front ends (the ``aio-cluster`` command, `aio_cluster.cli`,
and the web dashboard, `aio_cluster.dashboard`, which never import each other): the servers
reached from a connection's settings and the environment, a look at a group, reset and skip
plans, the health rules, and the controls' writes.

Modules::

    connection.py   Connection: the servers and how to reach them, from flags and the environment
    controls.py     what pause and resume act on, a skip's plan and its refusals (pure)
    environment.py  the command's name and the AIO_CLUSTER_* variables it reads
    health.py       the rules of check: each partition's samples judged (pure)
    looks.py        one look at a group across both servers, a reset's plan, the clients
    operate.py      pause, resume and skip: what they act on, read, and their writes
    plans.py        lag rows and offset-reset plans (pure)
    survey.py       the ZooKeeper reads of a group and the one-transaction offset write
"""
