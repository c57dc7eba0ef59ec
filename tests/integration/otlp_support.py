"""A real OTLP/HTTP metrics receiver on loopback: ``POST /v1/metrics`` bodies decoded as
``ExportMetricsServiceRequest`` protobufs (opentelemetry-proto), as a collector would.

It serves from a background thread, so the exporters of another process (the Spark job's
Python workers, an Airflow task) and of this one reach it alike.
"""

from __future__ import annotations

import asyncio
import gzip
import threading
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)


@dataclass(frozen=True)
class Point:
    """One data point as exported: its metric, resource and point attributes, and its
    value (sums and gauges) or ``count``/``total`` (histograms)."""

    metric: str
    unit: str
    resource: dict[str, Any]
    attributes: dict[str, Any]
    time: int
    value: float | None = None
    count: int | None = None
    total: float | None = None
    monotonic: bool = False


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def _attributes(pairs: Iterable[Any]) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


def decode(body: bytes) -> list[Point]:
    request = ExportMetricsServiceRequest()
    request.ParseFromString(body)
    points = []
    for resource_metrics in request.resource_metrics:
        resource = _attributes(resource_metrics.resource.attributes)
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                points += _points(metric, resource)
    return points


def _points(metric: Any, resource: dict[str, Any]) -> list[Point]:
    kind = metric.WhichOneof("data")
    data = getattr(metric, kind)
    found = []
    for point in data.data_points:
        common = {
            "metric": metric.name,
            "unit": metric.unit,
            "resource": resource,
            "attributes": _attributes(point.attributes),
            "time": point.time_unix_nano,
        }
        if kind in ("histogram", "exponential_histogram", "summary"):
            found.append(Point(**common, count=point.count, total=point.sum))
        else:
            number = point.as_int if point.WhichOneof("value") == "as_int" else point.as_double
            monotonic = kind == "sum" and data.is_monotonic
            found.append(Point(**common, value=number, monotonic=monotonic))
    return found


class OtlpReceiver:
    """``url`` is the base URL an exporter is given (``/v1/metrics`` is appended)."""

    def __init__(self) -> None:
        self.points: list[Point] = []
        self.url = ""
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/metrics", self._export)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def _stop(self) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def _export(self, request: web.Request) -> web.Response:
        body = await request.read()
        encoding = request.headers.get("Content-Encoding", "")
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        points = decode(body)
        with self._lock:
            self.points += points
        reply = ExportMetricsServiceResponse().SerializeToString()
        return web.Response(body=reply, content_type="application/x-protobuf")

    def latest(self) -> list[Point]:
        """The last point of every series (metric, resource, attributes): what a collector
        keeps of cumulative sums and histograms."""
        with self._lock:
            points = list(self.points)
        series: dict[tuple, Point] = {}
        for point in points:
            key = (
                point.metric,
                tuple(sorted(point.resource.items())),
                tuple(sorted(point.attributes.items())),
            )
            if key not in series or series[key].time <= point.time:
                series[key] = point
        return list(series.values())

    def total(self, metric: str, **attributes: Any) -> float:
        """A counter's value summed over every series whose attributes include these."""
        return sum(
            p.value or 0
            for p in self.latest()
            if p.metric == metric and attributes.items() <= p.attributes.items()
        )

    def histogram_count(self, metric: str, **attributes: Any) -> int:
        return sum(
            p.count or 0
            for p in self.latest()
            if p.metric == metric and attributes.items() <= p.attributes.items()
        )
