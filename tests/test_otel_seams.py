"""OpenTelemetry's seam (`aio_cluster.otel.seams`): the API's proxy meter provider fits the
installed opentelemetry-api, and tells the API's own providers from an SDK's; an API whose private
name moved (simulated here) is warned about, with the API's version, and the public fallback tells
them apart alike."""

from __future__ import annotations

import logging
import sys
import types
from importlib import metadata

import pytest
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider

from aio_cluster.otel import seams


def seam_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == seams.__name__ and record.levelno == logging.WARNING
    ]


@pytest.mark.seams
def test_the_proxy_meter_provider_fits_the_installed_api(
    caplog: pytest.LogCaptureFixture,
) -> None:
    proxy = seams.proxy_meter_provider()
    assert proxy is not None, "opentelemetry-api's private name moved: update the seam"
    assert seam_warnings(caplog) == []
    assert seams.is_api_meter_provider(proxy(), proxy)
    assert seams.is_api_meter_provider(metrics.NoOpMeterProvider(), proxy)
    assert not seams.is_api_meter_provider(MeterProvider(), proxy), "an SDK's records"


def test_an_api_whose_proxy_moved_is_warned_about_and_the_public_fallback_serves(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    moved = types.ModuleType("opentelemetry.metrics._internal")
    monkeypatch.setitem(sys.modules, "opentelemetry.metrics._internal", moved)
    with caplog.at_level(logging.WARNING, logger=seams.__name__):
        assert seams.proxy_meter_provider() is None
    (warning,) = seam_warnings(caplog)
    assert "opentelemetry-api" in warning
    assert "_ProxyMeterProvider" in warning
    monkeypatch.undo()

    proxy = seams.proxy_meter_provider()
    assert proxy is not None
    assert seams.is_api_meter_provider(proxy(), None), "told apart by its package"
    assert seams.is_api_meter_provider(metrics.NoOpMeterProvider(), None)
    assert not seams.is_api_meter_provider(MeterProvider(), None)


def test_an_api_without_its_metadata_still_falls_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Vendored or frozen, the API has no dist-info to name its version: the fallback serves."""
    moved = types.ModuleType("opentelemetry.metrics._internal")
    monkeypatch.setitem(sys.modules, "opentelemetry.metrics._internal", moved)

    def unknown(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", unknown)
    with caplog.at_level(logging.WARNING, logger=seams.__name__):
        assert seams.proxy_meter_provider() is None
    (warning,) = seam_warnings(caplog)
    assert "version unknown" in warning
