"""The HTTP client's metrics, aggregated here rather than in the SDK's instruments.

OpenTelemetry's Python SDK spends tens of microseconds in every synchronous ``record()``
(attribute checks, a lock, the aggregation's lookup), which at thousands of requests a
second is a fair share of a worker's CPU. So each request costs a bisect and a few
additions on plain data here, and the export reads the aggregate:

* ``http.client.request.duration``: an explicit-bucket histogram per attribute set (the
  semantic conventions' advised buckets), cumulative, added to each export by
  :class:`WithHttpClientMetrics`, a wrapper of the OTLP exporter (the SDK has no
  asynchronous histogram);
* ``http.client.active_requests``: a plain count per method, read by an observable
  up-down counter at each export.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Awaitable, Iterable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from opentelemetry.metrics import CallbackOptions, Meter, Observation
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

T = TypeVar("T")

#: The semantic conventions' advice for ``http.client.request.duration`` (seconds).
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)
SCOPE = InstrumentationScope("spark_jobs.telemetry.http_client")


class _Series:
    """One attribute set's histogram: bucket counts, count, sum, min, max."""

    __slots__ = ("buckets", "count", "high", "low", "total")

    def __init__(self) -> None:
        self.buckets = [0] * (len(DURATION_BUCKETS) + 1)
        self.count = 0
        self.total = 0.0
        self.low = float("inf")
        self.high = float("-inf")

    def add(self, seconds: float) -> None:
        self.buckets[bisect_left(DURATION_BUCKETS, seconds)] += 1  # bucket i: (b[i-1], b[i]]
        self.count += 1
        self.total += seconds
        self.low = min(self.low, seconds)
        self.high = max(self.high, seconds)


class HttpClientMetrics:
    """The requests to one server (the enricher's URLs never change host: redirects are
    same-origin only); :meth:`timed` is the sender's ``RequestObserver``."""

    def __init__(self, meter: Meter, url_template: str) -> None:
        parts = urlsplit(url_template)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        self._server: dict[str, Any] = {"server.address": parts.hostname or "", "server.port": port}
        self._series: dict[tuple[str, int | None, str | None], _Series] = {}
        self._active: dict[str, int] = {}
        self._start = time.time_ns()
        meter.create_observable_up_down_counter(
            "http.client.active_requests",
            [self._observe_active],
            "{request}",
            "Number of active HTTP requests.",
        )

    async def timed(self, method: str, request: Awaitable[T]) -> T:
        active = self._active
        active[method] = active.get(method, 0) + 1
        started = time.monotonic()
        try:
            reply = await request
        except BaseException as error:  # cancelled (a hedge lost, a timeout) too
            active[method] -= 1
            self._add((method, None, type(error).__name__), time.monotonic() - started)
            raise
        active[method] -= 1
        status = getattr(reply, "status", None)
        # The conventions: a status code of 400 or more is the error's type.
        error_type = str(status) if status is not None and status >= 400 else None
        self._add((method, status, error_type), time.monotonic() - started)
        return reply

    def _add(self, key: tuple[str, int | None, str | None], seconds: float) -> None:
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = _Series()
        series.add(seconds)

    def _observe_active(self, options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(count, {"http.request.method": method, **self._server})
            for method, count in list(self._active.items())
        ]

    def duration_metric(self) -> Metric | None:
        """``http.client.request.duration`` so far (cumulative); None before a request.
        Called from the exporting thread: ``list()`` copies under the GIL at once."""
        now = time.time_ns()
        points = []
        for (method, status, error_type), series in list(self._series.items()):
            attributes: dict[str, Any] = {"http.request.method": method, **self._server}
            if status is not None:
                attributes["http.response.status_code"] = status
            if error_type is not None:
                attributes["error.type"] = error_type
            points.append(
                HistogramDataPoint(
                    attributes=attributes,
                    start_time_unix_nano=self._start,
                    time_unix_nano=now,
                    count=series.count,
                    sum=series.total,
                    bucket_counts=list(series.buckets),
                    explicit_bounds=DURATION_BUCKETS,
                    min=series.low,
                    max=series.high,
                )
            )
        if not points:
            return None
        histogram = Histogram(points, AggregationTemporality.CUMULATIVE)
        return Metric(
            "http.client.request.duration", "Duration of HTTP client requests.", "s", histogram
        )


class WithHttpClientMetrics(MetricExporter):
    """The OTLP exporter, with the request histograms of ``clients`` added to each export
    of ``resource``'s metrics."""

    def __init__(self, exporter: MetricExporter, resource: Resource) -> None:
        super().__init__()
        self._exporter = exporter
        self._resource = resource
        self.clients: list[HttpClientMetrics] = []

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        own = [m for m in (c.duration_metric() for c in self.clients) if m is not None]
        if own:
            scope = ScopeMetrics(SCOPE, own, "")
            resources = list(metrics_data.resource_metrics) or [
                ResourceMetrics(self._resource, [], "")
            ]
            first = resources[0]
            resources[0] = ResourceMetrics(
                first.resource, [*first.scope_metrics, scope], first.schema_url
            )
            metrics_data = MetricsData(resources)
        return self._exporter.export(metrics_data, timeout_millis=timeout_millis, **kwargs)

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self._exporter.force_flush(timeout_millis=timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self._exporter.shutdown(timeout_millis=timeout_millis, **kwargs)
