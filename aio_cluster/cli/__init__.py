"""The ``aio-cluster`` command: look at groups and repair them.

Modules::

    health.py       the rules of ``check``: each partition's samples judged (pure)
    main.py         the command's arguments and I/O; ``main()`` is the console script
    plans.py        lag rows and offset-reset plans (pure)
    survey.py       the command's ZooKeeper reads and its one-transaction offset write
    tables.py       the command's tables and live display, drawn with rich
"""
