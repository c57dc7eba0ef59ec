"""A self-hosted model server on loopback (the demo's ``self-hosted`` profile: 8 requests
decode at once, the rest queue without limit, no rate headers, no 429): with
``model.provider: self-hosted`` the enricher keeps the server busy without flooding its
queue; with the fixed cap alone the same run floods it. Throughput and latency are the
server's own (its timeline and ``/stats``), so a busy client machine counts less.
The measure is the benchmark's (``benchmarks/self_hosted.py``), on fewer records."""

from __future__ import annotations

from typing import Any

from benchmarks.self_hosted import CAPACITY, enrich
from demo.batch_scheduler import BatchServing
from demo.model_api import ModelApi, run_model_api
from demo.provider_profiles import SelfHostedProfile


async def serve_records(provider: str, records: int) -> dict[str, Any]:
    api = ModelApi(profile=SelfHostedProfile(BatchServing(batch=8)))
    async with run_model_api(api) as base_url:
        run = await enrich(base_url, provider, records)
    assert run["records"] == records and run["requests_per_record"] == 1.0, run
    return run


async def test_a_self_hosted_server_is_kept_busy_with_its_latency_near_the_unloaded():
    run = await serve_records("self-hosted", 500)
    # The strict targets (0.9 of the best throughput) are the benchmark's; here they held
    # with 0.94-0.98 and 1.2-1.4x on loopback, and a busy machine may cost a little.
    assert run["throughput_share_of_best"] >= 0.85, run
    assert run["median_latency_x_unloaded"] <= 1.5, run
    assert 8 <= run["concurrency_limit_at_end"] <= 12, run
    assert run["max_waiting"] < 2 * 8, "the queue never held two batches"


async def test_the_fixed_cap_alone_floods_the_same_server():
    run = await serve_records("openai", 400)
    assert run["concurrency_limit_at_end"] == CAPACITY
    assert run["median_latency_x_unloaded"] > 3, run
    assert run["max_waiting"] >= CAPACITY - 8 - 4, run
