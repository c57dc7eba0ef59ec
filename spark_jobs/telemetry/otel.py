"""The OpenTelemetry side of :class:`~spark_jobs.telemetry.PartitionTelemetry`.

One ``MeterProvider`` per partition attempt, not the process's global one: a Python
worker runs several partitions one after another, each with resource attributes of its
own, and Airflow or a user's code may have set the global provider for their own ends.
The ``PeriodicExportingMetricReader`` aggregates in the worker and exports every
``interval`` seconds over OTLP/HTTP (protobuf); :meth:`close` exports a last time, so a
partition that ends (or fails) between two intervals loses nothing. Export failures are
the SDK's to log: they never fail the job.

The HTTP client's metrics follow OpenTelemetry's stable HTTP semantic conventions and are
aggregated outside the SDK's instruments (``http_client.py``: a ``record()`` per request
would cost a worker a fair share of its CPU); counters the enricher keeps anyway are read
by observable instruments at each export; everything of this job's own is under
``enrichment.``. Sums and histograms are cumulative per partition attempt.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME, Resource

from spark_jobs.records.enricher_stats import EnricherStats

from .http_client import HttpClientMetrics, WithHttpClientMetrics

SERVICE = "resumable-enrichment"
#: Snapshot commits take longer than a request: storage round trips, up to minutes.
COMMIT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
#: Enricher counters (keys of its ``stats``) exported as monotonic counters: name,
#: description, and the stats keys it reads with the attributes of each.
_COUNTERS: tuple[tuple[str, str, tuple[tuple[str, Mapping[str, str]], ...]], ...] = (
    (
        "enrichment.requests",
        "requests sent (what --max-requests budgets)",
        (("requests_made", {}),),
    ),
    ("enrichment.throttled", "429 answers", (("throttled", {}),)),
    ("enrichment.hedges", "hedged second requests sent", (("hedges_sent", {}),)),
    (
        "enrichment.coalesced_calls",
        "calls joined to one in flight",
        (("calls_saved_by_coalescing", {}),),
    ),
    (
        "enrichment.cache.hits",
        "answers from the in-memory cache or the response cache",
        (
            ("cache_hits", {"enrichment.cache": "memory"}),
            ("response_cache_hits", {"enrichment.cache": "response_cache"}),
        ),
    ),
)


class OtelPartitionTelemetry:
    """The metrics of one partition attempt, exported to ``endpoint`` (an OTLP/HTTP base
    URL: ``/v1/metrics`` is appended, as for ``OTEL_EXPORTER_OTLP_ENDPOINT``)."""

    def __init__(
        self,
        endpoint: str,
        interval: float,
        attributes: Mapping[str, Any],
        cost_per_request: float | None,
    ) -> None:
        identity = "/".join(
            str(attributes[k])
            for k in ("enrichment.run_id", "enrichment.partition", "enrichment.attempt")
        )
        # Resource.create adds OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME from the env.
        resource = Resource.create(
            {SERVICE_NAME: SERVICE, SERVICE_INSTANCE_ID: identity, **attributes}
        )
        otlp = OTLPMetricExporter(endpoint=f"{endpoint.rstrip('/')}/v1/metrics")
        self._exporter = WithHttpClientMetrics(otlp, resource)
        reader = PeriodicExportingMetricReader(
            self._exporter, export_interval_millis=interval * 1000
        )
        self._provider = MeterProvider(
            metric_readers=[reader], resource=resource, shutdown_on_exit=False
        )
        self._meter = self._provider.get_meter("spark_jobs.telemetry")
        self._cost_per_request = cost_per_request
        self._counters: Callable[[], EnricherStats] = EnricherStats
        self._instruments()

    def _instruments(self) -> None:
        meter = self._meter
        records = meter.create_counter
        self._enriched = records("enrichment.records.enriched", "{record}", "records committed")
        self._dead = records("enrichment.records.dead_letters", "{record}", "dead letters")
        self._replayed = records("enrichment.records.replayed", "{record}", "from snapshots")
        self._commit_duration = meter.create_histogram(
            "enrichment.snapshot.commit.duration",
            unit="s",
            description="Duration of snapshot commits.",
            explicit_bucket_boundaries_advisory=COMMIT_BUCKETS,
        )
        self._commit_size = meter.create_counter(
            "enrichment.snapshot.commit.size", "By", "bytes written by snapshot commits"
        )
        counter = meter.create_observable_counter
        counter("enrichment.retries", [self._retries], "{request}", "retryable failures")
        counter("enrichment.cost", [self._cost], "{cost}", "requests x --cost-per-request")
        for name, description, keys in _COUNTERS:
            counter(name, [self._reader(keys)], "{request}", description)

    def _reader(
        self, keys: tuple[tuple[str, Mapping[str, str]], ...]
    ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            stats = self._counters()
            return [Observation(getattr(stats, name), dict(a)) for name, a in keys]

        return observe

    def _retries(self, options: CallbackOptions) -> Iterable[Observation]:
        reasons = self._counters().retries_by_reason
        return [Observation(n, {"error.type": reason}) for reason, n in reasons.items()]

    def _cost(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._cost_per_request is None:
            return []
        requests = self._counters().requests_made
        return [Observation(requests * self._cost_per_request)]

    def request_observer(self, url_template: str) -> HttpClientMetrics:
        client = HttpClientMetrics(self._meter, url_template)
        self._exporter.clients.append(client)
        return client

    def watch(self, counters: Callable[[], EnricherStats]) -> None:
        self._counters = counters

    def replayed(self, records: int) -> None:
        self._replayed.add(records)

    def committed(
        self, enriched: int, errors: Sequence[pa.Array], seconds: float, size: int
    ) -> None:
        self._enriched.add(enriched)
        for error_type, count in _error_types(errors).items():
            self._dead.add(count, {"error.type": error_type})
        self._commit_duration.record(seconds)
        self._commit_size.add(size)

    def close(self) -> None:
        self._provider.shutdown()  # collects and exports once more, then stops


def _error_types(errors: Sequence[pa.Array]) -> dict[str, int]:
    """Dead letters by error class, from their ``"ClassName: message"`` errors."""
    counts: dict[str, int] = {}
    for column in errors:
        for error in column.to_pylist():
            kind = str(error).split(":", 1)[0]
            counts[kind] = counts.get(kind, 0) + 1
    return counts
