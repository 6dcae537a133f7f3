"""``python -m aio_cluster``: the ``aio-cluster`` command (see :mod:`aio_cluster.cli`)."""

import sys

from .cli import main

sys.exit(main())
