"""``python -m aio_cluster.local up|down``: see `main()`."""

import sys

from .cli import main

sys.exit(main())
