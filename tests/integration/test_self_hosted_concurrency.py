"""A self-hosted model server on loopback (the demo's ``self-hosted`` profile: 8 requests
decode at once, the rest queue without limit, no rate headers, no 429): with
``model.provider: self-hosted`` the enricher keeps the server busy without flooding its
queue; with the fixed cap alone the same run floods it. Throughput and latency are the
server's own (its timeline and ``/stats``), so a busy client machine does not count."""

from __future__ import annotations

import statistics
from typing import Any

from demo.batch_scheduler import BatchServing
from demo.model_api import ModelApi, run_model_api
from demo.provider_profiles import SelfHostedProfile
from spark_jobs.asyncwait import AsyncWaitOperator, Result
from spark_jobs.enrichers import HttpEnricher, HttpEnricherConfig
from spark_jobs.enrichers.model_endpoint import (
    ModelAnswers,
    ModelConfig,
    ModelPacing,
    request_options,
)

CAPACITY = 64


async def serve_records(provider: str, records: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Enrich ``records`` through the operator (capacity 64) against the demo's default
    self-hosted server; (the enricher's stats, the server's steady-state yardsticks)."""
    api = ModelApi(profile=SelfHostedProfile(BatchServing(batch=8)))
    async with run_model_api(api) as base_url:
        config = ModelConfig(model="local", prompt="Summarise ticket {id}", provider=provider)
        options: dict[str, Any] = {
            "url_template": base_url + "/chat/completions",
            "response_fields": {"unused": "$.unused"},
            "capacity": CAPACITY,
            "cache_size": 0,
        }
        options.update(request_options(config, options))
        http = HttpEnricherConfig.from_dict(options)
        pacing = ModelPacing(config, partitions=1)
        async with HttpEnricher(http, answers=ModelAnswers(config), pacing=pacing) as enrich:
            operator = AsyncWaitOperator(enrich, mode="unordered", capacity=CAPACITY)
            outputs = [o async for o in operator.run({"id": i} for i in range(records))][:-1]
            stats = enrich.stats
    assert len(outputs) == records and all(isinstance(o, Result) for o in outputs)
    return stats, steady_state(api)


def steady_state(api: ModelApi) -> dict[str, Any]:
    """The server's throughput and median latency between the first fifth of the answers
    (the client's start) and the last tenth (its drain), beside its yardsticks."""
    ends = sorted(call.at + call.latency_s for call in api.timeline)
    calls = sorted(api.timeline, key=lambda call: call.at + call.latency_s)
    first, last = len(ends) // 5, len(ends) * 9 // 10
    yardsticks = api.provider.stats()["self_hosted"]
    return {
        "throughput": (last - first) / (ends[last] - ends[first]),
        "median_latency_s": statistics.median(c.latency_s for c in calls[first:last]),
        "best_requests_per_s": yardsticks["best_requests_per_s"],
        "unloaded_latency_s": yardsticks["unloaded_latency_s"],
        "max_waiting": yardsticks["max_waiting"],
    }


async def test_a_self_hosted_server_is_kept_busy_with_its_latency_near_the_unloaded():
    stats, server = await serve_records("self-hosted", 500)
    # The strict targets (0.9 of the best throughput, 1.5x) are benchmarks/self_hosted.py's;
    # on loopback they held with 0.98 and 1.2-1.4x, a busy machine may cost a little.
    assert server["throughput"] >= 0.85 * server["best_requests_per_s"], server
    assert server["median_latency_s"] <= 1.5 * server["unloaded_latency_s"], server
    assert 8 <= stats["current_concurrency_limit"] <= 12, stats
    assert server["max_waiting"] < 2 * 8, "the queue never held two batches"


async def test_the_fixed_cap_alone_floods_the_same_server():
    stats, server = await serve_records("openai", 400)
    assert stats["current_concurrency_limit"] == CAPACITY
    assert server["median_latency_s"] > 3 * server["unloaded_latency_s"], server
    assert server["max_waiting"] >= CAPACITY - 8 - 4
