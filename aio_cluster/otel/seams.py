"""Every private name of OpenTelemetry's API the package uses, in one place, checked against the
installed API, with the public path that serves when it does not fit.

- ``opentelemetry.metrics._internal._ProxyMeterProvider``: the meter provider the API hands out
  until an SDK's is set. A member tells from it that nobody reads its meters, and then skips the
  per-record work of metering (see `aio_cluster.otel.telemetry`); the API exports the no-op
  provider but not this one. Checked once, at import: it must be a class of the API's
  ``MeterProvider``. Without it (the name moved in a release): a provider counts as the API's own
  when its class is defined in the API's ``opentelemetry.metrics`` package, which holds no
  provider that records (recording is an SDK's); a misfit is warned about once, with the API's
  version, and never fails an import.
"""

from __future__ import annotations

import importlib
import logging
from importlib import metadata

from opentelemetry import metrics

__all__ = ["is_api_meter_provider", "proxy_meter_provider"]

log = logging.getLogger(__name__)

_PROXY_MODULE = "opentelemetry.metrics._internal"
_PROXY_NAME = "_ProxyMeterProvider"
_API_PACKAGE = "opentelemetry.metrics"


def proxy_meter_provider() -> type[metrics.MeterProvider] | None:
    """The API's proxy meter provider class; None, with a warning, when it does not fit."""
    try:
        found = getattr(importlib.import_module(_PROXY_MODULE), _PROXY_NAME)
    except (ImportError, AttributeError) as exc:
        reason = f"{type(exc).__name__}: {exc}"
    else:
        if isinstance(found, type) and issubclass(found, metrics.MeterProvider):
            return found
        reason = f"{_PROXY_MODULE}.{_PROXY_NAME} is no MeterProvider class"
    try:
        version = metadata.version("opentelemetry-api")
    except metadata.PackageNotFoundError:  # installed without its metadata (vendored, frozen)
        version = "(version unknown)"
    log.warning(
        "opentelemetry-api %s: its proxy meter provider does not fit (%s); a meter provider "
        "defined in %s counts as the API's own instead",
        version,
        reason,
        _API_PACKAGE,
    )
    return None


_PROXY = proxy_meter_provider()


def is_api_meter_provider(
    provider: object, proxy: type[metrics.MeterProvider] | None = _PROXY
) -> bool:
    """Whether ``provider`` is one of the API's own, which record nothing: what
    ``metrics.get_meter_provider()`` returns until an SDK's is set, or the no-op one.
    ``proxy``: the API's proxy class (None: it did not fit, see the module)."""
    if isinstance(provider, metrics.NoOpMeterProvider):
        return True
    if proxy is not None:
        return isinstance(provider, proxy)
    module = type(provider).__module__
    return module == _API_PACKAGE or module.startswith(_API_PACKAGE + ".")
