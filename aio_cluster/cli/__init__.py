"""The ``aio-cluster`` command: look at groups and repair them. Its tools (the looks, plans,
health rules and controls' writes) are `aio_cluster.operator`'s; this package parses, resolves
and prints.

Modules::

    arguments.py    the parser of every flag (``local``'s too), resolved with the environment
    flags.py        each subcommand option declared once, and the subcommands that take it
    main.py         one function per subcommand, what it prints; ``main()`` runs the command
    operate.py      pause, resume and skip: what they print
    options.py      the typed values each subcommand takes, one dataclass per subcommand
    tables.py       the command's tables and live display, drawn with rich
"""
