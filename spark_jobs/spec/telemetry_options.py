"""The telemetry options (``--otel-endpoint``, ``--otel-interval``), checked before Spark
starts; the telemetry itself (``spark_jobs/telemetry``) takes them checked and imports
nothing of the spec.
"""

from __future__ import annotations

import os
from typing import Protocol

from .option_values import check

#: The standard variable that turns telemetry on when ``--otel-endpoint`` is not given.
ENDPOINT_VARIABLE = "OTEL_EXPORTER_OTLP_ENDPOINT"


class TelemetryFlags(Protocol):
    @property
    def otel_endpoint(self) -> str | None: ...
    @property
    def otel_interval(self) -> float: ...


def endpoint_from_environment(endpoint: str | None) -> str | None:
    """``--otel-endpoint``, else the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` (read on the
    driver, so executors started without it export too)."""
    return endpoint or os.environ.get(ENDPOINT_VARIABLE) or None


def check_telemetry_options(spec: TelemetryFlags) -> None:
    """An endpoint is an http(s) base URL without credentials or query (it is logged and
    goes on the command line; collector headers come from OTEL_EXPORTER_OTLP_HEADERS)."""
    from importlib.util import find_spec
    from urllib.parse import urlsplit

    check(spec.otel_interval > 0, "otel_interval", f"must be > 0, got {spec.otel_interval!r}")
    if not spec.otel_endpoint:
        return
    parts = urlsplit(spec.otel_endpoint)
    check(  # before anything that quotes the URL
        not (parts.username or parts.password or parts.query),
        "otel_endpoint",
        "must not hold credentials or a query; give collector headers in "
        "OTEL_EXPORTER_OTLP_HEADERS",
    )
    check(
        parts.scheme in ("http", "https") and bool(parts.hostname),
        "otel_endpoint",
        f"must be an http(s) URL such as http://collector:4318, got {spec.otel_endpoint!r}",
    )
    check(
        find_spec("opentelemetry.sdk") is not None
        and find_spec("opentelemetry.exporter.otlp.proto.http") is not None,
        "otel_endpoint",
        "needs opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http where the job "
        "runs (pip install 'resumable-enrichment[otel]'; make dist packs them)",
    )
