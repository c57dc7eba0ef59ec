"""The workers' metrics against a real OTLP/HTTP receiver on loopback: the HTTP enricher's
requests through the async wait operator (no Spark), and one small Spark ``local[2]`` run
whose exported counts equal its ``_SUMMARY.json``."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import pytest
from aiohttp import web

from spark_jobs.asyncwait import AsyncWaitOperator, Failure, Result
from spark_jobs.enrichers import HttpEnricher, HttpEnricherConfig, default_retry_strategy
from spark_jobs.telemetry.otel import OtelPartitionTelemetry

from .http_support import serve
from .job_support import job_args, read_output, run_job, write_input
from .otlp_support import OtlpReceiver

RESOURCE = {
    "enrichment.dag_id": "daily",
    "enrichment.task_id": "enrich",
    "enrichment.interval_start": "2026-11-24",
    "enrichment.run_id": "r1",
    "enrichment.partition": 3,
    "enrichment.attempt": "s0-t7-a0",
}


class FlakyApi:
    """``/customers/{id}``: ``bad*`` ids get 400 (a dead letter), ``flaky*`` ids a 503 on
    their first call (a retry), every other id its record. Counts what it received."""

    def __init__(self) -> None:
        self.received = 0
        self.by_status: collections.Counter[int] = collections.Counter()
        self._seen: set[str] = set()

    async def __call__(self, request: web.Request) -> web.Response:
        self.received += 1
        key = request.path.rsplit("/", 1)[-1]
        status = 200
        if key.startswith("bad"):
            status = 400
        elif key.startswith("flaky") and key not in self._seen:
            status = 503
        self._seen.add(key)
        self.by_status[status] += 1
        if status != 200:
            return web.json_response({"error": "no"}, status=status)
        return web.json_response({"name": key.upper(), "score": 0.5})


def enricher_config(base_url: str) -> HttpEnricherConfig:
    return HttpEnricherConfig(
        url_template=base_url + "/customers/{id}",
        response_fields={"name": "$.name", "score": ["$.score", "float"]},
    )


async def test_the_enrichers_requests_reach_the_receiver_with_the_http_conventions():
    api = FlakyApi()
    ids = [f"ok{i}" for i in range(30)] + [f"bad{i}" for i in range(4)] + ["flaky0", "flaky1"]
    with OtlpReceiver() as receiver:
        async with serve(api) as base_url:
            telemetry = OtelPartitionTelemetry(receiver.url, 60, RESOURCE, 0.01)
            async with HttpEnricher(enricher_config(base_url)) as enrich:
                enrich.observe_requests(telemetry.request_observer(base_url + "/customers/{id}"))
                telemetry.watch(lambda: enrich.stats)
                operator = AsyncWaitOperator(
                    enrich, capacity=8, timeout=30, retry=default_retry_strategy(3)
                )
                outputs = [o async for o in operator.run([{"id": i} for i in ids])][:-1]
                stats = enrich.stats
            await asyncio.to_thread(telemetry.close)  # the last export: the interval is 60 s
        port = int(base_url.rsplit(":", 1)[1])

    assert sum(isinstance(o, Result) for o in outputs) == 32
    assert sum(isinstance(o, Failure) for o in outputs) == 4
    assert api.received == 38 == stats.requests_made
    assert receiver.histogram_count("http.client.request.duration") == api.received
    server = {"server.address": "127.0.0.1", "server.port": port, "http.request.method": "GET"}
    ok = receiver.histogram_count(
        "http.client.request.duration", **server, **{"http.response.status_code": 200}
    )
    assert ok == api.by_status[200] == 32
    assert (
        receiver.histogram_count(
            "http.client.request.duration",
            **{"http.response.status_code": 400, "error.type": "400"},
        )
        == 4
    )
    assert (
        receiver.histogram_count(
            "http.client.request.duration",
            **{"http.response.status_code": 503, "error.type": "503"},
        )
        == 2
    )
    duration = next(p for p in receiver.latest() if p.metric == "http.client.request.duration")
    assert duration.unit == "s" and duration.resource["enrichment.partition"] == 3
    assert {k: duration.resource[k] for k in RESOURCE} == RESOURCE
    assert duration.resource["service.name"] == "resumable-enrichment"
    assert receiver.total("http.client.active_requests") == 0  # every request ended
    assert receiver.total("enrichment.requests") == 38
    assert receiver.total("enrichment.retries", **{"error.type": "ServerError"}) == 2
    assert receiver.total("enrichment.cost") == pytest.approx(0.38)


async def test_a_request_that_fails_below_http_carries_its_error_type():
    async def reset(request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        request.transport.abort()  # a reset: no status line at all
        return web.Response()

    with OtlpReceiver() as receiver:
        async with serve(reset) as base_url:
            telemetry = OtelPartitionTelemetry(receiver.url, 60, RESOURCE, None)
            async with HttpEnricher(enricher_config(base_url)) as enrich:
                enrich.observe_requests(telemetry.request_observer(base_url + "/customers/{id}"))
                telemetry.watch(lambda: enrich.stats)
                operator = AsyncWaitOperator(enrich, capacity=2, timeout=30)
                outputs = [o async for o in operator.run([{"id": "x"}])][:-1]
            await asyncio.to_thread(telemetry.close)

    assert isinstance(outputs[0], Failure)
    points = [p for p in receiver.latest() if p.metric == "http.client.request.duration"]
    assert [(p.count, p.attributes.get("error.type")) for p in points] == [(1, "TransportError")]
    assert "http.response.status_code" not in points[0].attributes
    assert receiver.total("enrichment.cost") == 0  # no price given: no cost series


def export_totals(receiver: OtlpReceiver) -> dict[str, Any]:
    return {
        "enriched": receiver.total("enrichment.records.enriched"),
        "dead_letters": receiver.total("enrichment.records.dead_letters"),
        "requests_made": receiver.total("enrichment.requests"),
    }


@pytest.mark.spark
@pytest.mark.slow
async def test_a_spark_runs_exported_counts_equal_its_summary(tmp_path):
    """Two partitions on local[2]: what the receiver holds once the job has ended equals
    ``_SUMMARY.json``, and the request histogram counts every request the API received."""
    api = FlakyApi()
    ids = [f"ok{i:03d}" for i in range(240)] + [f"bad{i}" for i in range(6)]
    ids += [f"flaky{i}" for i in range(4)]
    write_input(tmp_path / "in" / "part.jsonl", ids)
    with OtlpReceiver() as receiver:
        async with serve(api) as base_url:
            args = job_args(tmp_path, base_url, "--partitions", "2", "--otel-endpoint")
            args += [receiver.url, "--otel-interval", "1", "--cost-per-request", "0.002"]
            args += ["--run-id", "metrics1", "--dag-id", "daily", "--task-id", "enrich"]
            status, log = await asyncio.to_thread(run_job, args)
        assert status == 0, log[-5000:]
        data, dead, summary = read_output(tmp_path / "out")
        points = receiver.latest()

    assert (summary["enriched"], summary["dead_letters"]) == (244, 6)
    assert export_totals(receiver) == {
        "enriched": summary["enriched"],
        "dead_letters": summary["dead_letters"],
        "requests_made": summary["requests_made"],
    }
    assert (
        receiver.total("enrichment.records.dead_letters", **{"error.type": "ClientStatusError"})
        == 6
    )
    assert summary["requests_made"] == api.received == 254  # 250 records, 4 retried
    assert receiver.histogram_count("http.client.request.duration") == api.received
    assert receiver.total("enrichment.retries", **{"error.type": "ServerError"}) == 4
    assert receiver.total("enrichment.cost") == pytest.approx(summary["cost"]["estimated_cost"])
    commits = receiver.histogram_count("enrichment.snapshot.commit.duration")
    assert commits >= 2 and receiver.total("enrichment.snapshot.commit.size") > 0
    resources = {
        (p.resource["enrichment.partition"], p.resource["enrichment.run_id"]) for p in points
    }
    assert resources == {(0, "metrics1"), (1, "metrics1")}
    assert {p.resource["enrichment.dag_id"] for p in points} == {"daily"}
    assert len(data) == 244 and len(dead) == 6


def test_a_failed_partition_exports_its_metrics_and_its_resume_counts_the_replay(tmp_path):
    """The partition runner without Spark: an outage fails the attempt, whose last export
    still reaches the receiver (the interval alone would have sent nothing); the resumed
    attempt reports the records it replayed from the snapshot."""
    from spark_jobs.snapshots import NamespaceKey, SnapshotStore

    from ..unit import test_partition_runner as runner_tests

    with OtlpReceiver() as receiver:
        spec = runner_tests.make_spec(
            str(tmp_path),
            "unordered",
            40,
            max_attempts=2,
            outage_threshold=5,
            enricher="tests.unit.test_partition_runner:outage_from",
            otel_endpoint=receiver.url,
            otel_interval=600,
        )
        runner_tests.CALLS.clear()
        runner_tests.API_DOWN["from"] = "k0120"
        try:
            with pytest.raises(runner_tests.ApiOutageError):
                runner_tests.run_partition(spec, 300, None, "a0")
            calls = sum(runner_tests.CALLS.values())
            runner_tests.API_DOWN["from"] = None
            runner_tests.run_partition(spec, 300, None, "a1")
        finally:
            runner_tests.API_DOWN["from"] = None
        points = receiver.latest()
    store = SnapshotStore(str(tmp_path)).partition(NamespaceKey("d", "t", "i"), 0)

    def of(attempt: str, metric: str) -> float:
        return sum(
            p.value or 0
            for p in points
            if p.metric == metric and p.resource["enrichment.attempt"] == attempt
        )

    assert of("a0", "enrichment.requests") == calls > 0
    assert 0 < of("a0", "enrichment.records.enriched") < 300
    assert of("a1", "enrichment.records.replayed") == of("a0", "enrichment.records.enriched")
    done = of("a0", "enrichment.records.enriched") + of("a1", "enrichment.records.enriched")
    assert done == store.latest().committed_rows == 300
