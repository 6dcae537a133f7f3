"""``python -m aio_cluster``: the ``aio-cluster`` command (see `aio_cluster.cli`)."""

import sys

from .cli.main import main

sys.exit(main())
