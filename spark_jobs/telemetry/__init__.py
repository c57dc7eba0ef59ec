"""The workers' metrics over OpenTelemetry, off unless an OTLP endpoint is configured.

Each partition attempt gets a :class:`PartitionTelemetry`. With no endpoint it is
:data:`NO_TELEMETRY`, whose methods do nothing and which never imports the OpenTelemetry
SDK: the HTTP sender then holds no request observer at all (``observer is None``: one
comparison per request), so a job without telemetry pays nothing measurable. With an
endpoint, ``otel.py`` builds one meter provider per partition attempt (its resource names
the DAG, task, interval, run, partition and attempt), aggregates in the worker and exports
on an interval (``otel_interval``), and once more when the partition ends or fails.

What is recorded where:

* every HTTP request: ``http.client.request.duration`` and ``http.client.active_requests``
  (the sender, through a :class:`RequestObserver`);
* counters the enricher keeps anyway (requests, retries by reason, throttled answers,
  hedges, cache hits, coalesced calls): read from its plain ``stats`` at each export,
  never per record;
* records committed (enriched, dead letters by class), records replayed, snapshot
  commits (duration, bytes): once per cut, by the runner and the committer.

The names and attributes are documented in docs/telemetry.md. Standard library
only: the partition runner imports this module whether telemetry is on or not.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from spark_jobs.records.enricher_stats import EnricherStats

if TYPE_CHECKING:
    import pyarrow as pa

T = TypeVar("T")

#: The resource attribute naming each part of the OpenLineage parent job (the Airflow task).
LINEAGE_ATTRIBUTES = {
    "namespace": "openlineage.parent.job.namespace",
    "name": "openlineage.parent.job.name",
    "run_id": "openlineage.parent.run.id",
}


class TelemetryOptions(Protocol):
    """The job spec's fields telemetry reads (``JobSpec``; its options are checked in
    ``spec/telemetry_options.py``)."""

    @property
    def otel_endpoint(self) -> str | None: ...
    @property
    def otel_interval(self) -> float: ...
    @property
    def lineage_parent(self) -> dict[str, str]: ...
    @property
    def cost_per_request(self) -> float | None: ...
    @property
    def dag_id(self) -> str: ...
    @property
    def task_id(self) -> str: ...
    @property
    def interval_start(self) -> str: ...


class RequestObserver(Protocol):
    """Times one HTTP request (``http.client.*`` instruments)."""

    def timed(self, method: str, request: Awaitable[T]) -> Awaitable[T]:
        """``request``'s result; its duration, status or error recorded, in flight meanwhile."""
        ...


class PartitionTelemetry(Protocol):
    """What one partition attempt reports; every method is cheap and never raises."""

    def request_observer(self, url_template: str) -> RequestObserver | None:
        """The observer for requests to ``url_template``'s server; None when off."""
        ...

    def watch(self, counters: Callable[[], EnricherStats]) -> None:
        """Read the enricher's ``counters`` (its ``stats``) at every export."""
        ...

    def replayed(self, records: int) -> None: ...

    def committed(
        self, enriched: int, errors: Sequence[pa.Array], seconds: float, size: int
    ) -> None:
        """A snapshot commit of ``size`` bytes that took ``seconds``: ``enriched`` records,
        and a dead letter for each of the ``errors`` (``_error`` columns)."""
        ...

    def close(self) -> None:
        """Export what is left and stop (the partition ended or failed); blocking."""
        ...


class _NoTelemetry:
    """Telemetry off: nothing is recorded and nothing is imported."""

    def request_observer(self, url_template: str) -> RequestObserver | None:
        return None

    def watch(self, counters: Callable[[], EnricherStats]) -> None:
        pass

    def replayed(self, records: int) -> None:
        pass

    def committed(
        self, enriched: int, errors: Sequence[pa.Array], seconds: float, size: int
    ) -> None:
        pass

    def close(self) -> None:
        pass


NO_TELEMETRY: PartitionTelemetry = _NoTelemetry()


def partition_telemetry(
    spec: TelemetryOptions, partition: int, attempt: str, run_id: str
) -> PartitionTelemetry:
    """The telemetry of one partition attempt: :data:`NO_TELEMETRY` without an endpoint."""
    if not spec.otel_endpoint:
        return NO_TELEMETRY
    from .otel import OtelPartitionTelemetry  # the SDK loads only when telemetry is on

    attributes = {
        "enrichment.dag_id": spec.dag_id,
        "enrichment.task_id": spec.task_id,
        "enrichment.interval_start": spec.interval_start,
        "enrichment.run_id": run_id,
        "enrichment.partition": partition,
        "enrichment.attempt": attempt,
    }
    for name, value in spec.lineage_parent.items():
        if name in LINEAGE_ATTRIBUTES:
            attributes[LINEAGE_ATTRIBUTES[name]] = value
    return OtelPartitionTelemetry(
        spec.otel_endpoint, spec.otel_interval, attributes, spec.cost_per_request
    )
