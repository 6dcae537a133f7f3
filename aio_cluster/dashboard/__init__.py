"""The live web dashboard of the groups (``aio-cluster dashboard``, or mounted in an ASGI
application): `Dashboard`. Needs the ``dashboard`` extra (Starlette; uvicorn for the command).

Modules::

    app.py          Dashboard: its lifecycle, its routes, the event streams, the token check
    charts.py       lag over time and the ownership timeline, drawn as SVG (pure)
    controls.py     a partition's pause, resume or skip planned and written from the page
    history.py      a group's looks remembered: lag, samples, owners; servers' reachability (pure)
    kept.py         the plans made and not written yet, the newest kept (pure)
    pages.py        the HTML of the pages and of the fragments the event stream sends (pure)
    resets.py       offset resets planned and stored from the page, with reset-offsets' fences
    views.py        the tables' rows: aggregated, filtered, paginated (pure)
    watch.py        the periodic reads of the groups, the servers' clients
"""

from .app import Dashboard

__all__ = ["Dashboard"]
