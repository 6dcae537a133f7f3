"""The ``aio-cluster`` command: look at groups and repair them.

Modules::

    arguments.py    every flag (``local``'s too), resolved with the environment into typed values
    controls.py     what pause and resume act on, a skip's plan and its refusals (pure)
    health.py       the rules of ``check``: each partition's samples judged (pure)
    looks.py        one look at a group across both servers, a reset's plan (the dashboard's too)
    main.py         one function per subcommand, its I/O; ``main()`` is the console script
    operate.py      pause, resume and skip: an operator's control of a running group, their I/O
    plans.py        lag rows and offset-reset plans (pure)
    survey.py       the command's ZooKeeper reads and its one-transaction offset write
    tables.py       the command's tables and live display, drawn with rich
"""
