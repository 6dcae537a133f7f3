"""``aio-cluster`` and ``python -m aio_cluster``: the command line (`aio_cluster.cli`) with its
``dashboard`` subcommand served by the web dashboard (`aio_cluster.dashboard`).

The two front ends stand side by side on the operator's tools (`aio_cluster.operator`) and never
import each other: this module, above both, is the one place that joins them. It imports the
dashboard only when its subcommand runs, since that needs the ``dashboard`` extra.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from .cli import main as command_line
from .cli.options import DashboardOptions
from .errors import ConfigurationError
from .operator.connection import Connection
from .operator.environment import PROG

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command (the console script ``aio-cluster``).

    Args:
        argv: the arguments after the program name; default ``sys.argv[1:]``.

    Returns:
        The exit status (see `aio_cluster.cli.main.main`).
    """
    return command_line.main(argv, dashboard=_dashboard)


async def _dashboard(connection: Connection, options: DashboardOptions) -> int:
    """Serve the dashboard until SIGINT or SIGTERM (uvicorn handles both)."""
    try:
        import uvicorn  # noqa: PLC0415 - the dashboard extra's, only this command needs it

        from .dashboard import Dashboard  # noqa: PLC0415 - it needs Starlette, of that extra
    except ImportError as exc:
        raise ConfigurationError(
            f"the dashboard needs the dashboard extra ({exc.name} is missing): "
            "pip install 'aio-cluster[dashboard]'"
        ) from None
    dashboard = Dashboard(
        connection.bootstrap_address(),
        connection.zookeeper_address(),
        groups=options.groups,
        interval=options.interval,
        keep=options.keep,
        window=options.window,
        lag_threshold=options.thresholds.lag,
        max_lag=options.thresholds.max_lag,
        timeout=connection.timeout,
        kafka_options=connection.kafka,
        zookeeper_security=connection.security,
        write_token=options.token,
    )
    config = uvicorn.Config(
        dashboard.app,
        host=options.host,
        port=options.port,
        log_level="warning",
        timeout_graceful_shutdown=2,  # the event streams never end by themselves
    )
    server = uvicorn.Server(config)
    writes = "offset resets allowed with the token" if dashboard.writes else "read-only"
    print(f"{PROG}: dashboard on http://{options.host}:{options.port}/ ({writes})", file=sys.stderr)
    await server.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
