"""``python -m aio_cluster.local up|down``: see :func:`aio_cluster.local.cli.main`."""

import sys

from .cli import main

sys.exit(main())
