"""The real HTTP enricher and operator against the demo API under a hard rate limit on
loopback, with no ``requests_per_second``: the rate controller must find the limit.

Assertions are on counts and shares the server itself reports (its per-second stats),
not on wall time, so they hold on a busy machine (``python -m tests.under_load``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from demo.api import run_demo_api
from demo.faults import DemoConfig
from demo.rate_limit import RateLimit
from spark_jobs.asyncwait import AsyncWaitOperator, Result
from spark_jobs.enrichers import HttpEnricher, HttpEnricherConfig, default_retry_strategy

LIMIT = 100  # requests/s over the whole server
WARM_UP_S = 5  # whole seconds of the server's stats left out of the throughput


def settings(base_url: str) -> HttpEnricherConfig:
    return HttpEnricherConfig(
        url_template=base_url + "/customers/{id}",
        response_fields={"name": "$.name"},
        capacity=32,
    )


async def enrich_partition(enrich: HttpEnricher, ids: range) -> list[Any]:
    operator = AsyncWaitOperator(
        enrich, mode="unordered", capacity=64, timeout=30, retry=default_retry_strategy()
    )
    return [o async for o in operator.run({"id": f"c{i:06d}"} for i in ids)][:-1]


async def server_stats(base_url: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.get(base_url + "/stats") as response:
            return await response.json()


def throughput_after_warm_up(stats: dict[str, Any]) -> float:
    """Mean 200s per whole second after the warm-up, the last (partial) second left out."""
    seconds = sorted(int(s) for s in stats["per_second"])
    counted = [s for s in seconds if WARM_UP_S <= s < seconds[-1]]
    assert len(counted) >= 3, f"too short a run to measure: {seconds}"
    return sum(stats["per_second"][str(s)].get("200", 0) for s in counted) / len(counted)


@pytest.mark.parametrize("header_style", ["none", "openai", "ietf"])
async def test_one_partition_converges_on_the_limit_without_dead_letters(header_style):
    config = DemoConfig(latency_ms=20)
    async with run_demo_api(config, rate_limit=RateLimit(LIMIT, header_style)) as base_url:
        async with HttpEnricher(settings(base_url)) as enrich:
            outputs = await enrich_partition(enrich, range(1200))
        stats = await server_stats(base_url)
    assert len(outputs) == 1200 and all(isinstance(o, Result) for o in outputs)
    throttled = stats["by_status"].get("429", 0)
    assert throttled / stats["total"] <= 0.05, stats["by_status"]
    # Near the limit, not ratcheted down by its cuts (that sat far below half of it); how
    # near is the benchmark's to say (over 0.8 on a quiet machine, 0.77 with the
    # suite's three workers on two cores): windows vs stats allow the 5 % above.
    assert 0.65 * LIMIT <= throughput_after_warm_up(stats) <= 1.05 * LIMIT


async def test_four_partitions_sharing_the_limit_each_get_a_fair_share():
    async with run_demo_api(DemoConfig(latency_ms=20), rate_limit=RateLimit(LIMIT)) as base_url:
        enrichers = [HttpEnricher(settings(base_url)) for _ in range(4)]
        for enrich in enrichers:
            await enrich.__aenter__()
        try:
            parts = [
                asyncio.ensure_future(enrich_partition(e, range(i * 400, (i + 1) * 400)))
                for i, e in enumerate(enrichers)
            ]
            await asyncio.wait(parts, return_when=asyncio.FIRST_COMPLETED)
            made_when_first_done = [e.stats.requests_made for e in enrichers]
            outputs = [o for part in await asyncio.gather(*parts) for o in part]
        finally:
            for enrich in enrichers:
                await enrich.__aexit__(None, None, None)
        stats = await server_stats(base_url)
    assert len(outputs) == 1600 and all(isinstance(o, Result) for o in outputs)
    # Each partition's first slow start lets a tick's worth of its rate go at once (a
    # fast API that states no limit: 1.25x the records/s), a few more 429s when the four
    # meet the limit together: 85-90 of 1 690 calls, 54-58 before (three runs each).
    assert stats["by_status"].get("429", 0) / stats["total"] <= 0.06, stats["by_status"]
    # No coordinator, yet none starves: when the first partition is done, every other
    # one has sent at least half as many calls.
    assert min(made_when_first_done) >= 0.5 * max(made_when_first_done)
    # Four partitions started together leave slow start one by one (a full window
    # refuses only the few calls at its end): they hold less of the limit than one does
    # (about 0.75 of it here, the tail included), which the benchmark measures.
    assert 0.5 * LIMIT <= throughput_after_warm_up(stats) <= 1.05 * LIMIT


@pytest.mark.parametrize("rate_429", [0.0, 0.02])
async def test_isolated_429s_delay_only_their_own_record_never_the_partition(rate_429):
    """Random 429s (Retry-After: 1) on 2 % of calls and no rate limit: each throttled
    record is retried after its Retry-After, spending no attempt, while the rate is never
    cut and no other send paused (it used to ratchet down to ~11/s: 193 s for 2 000
    records). The 0 % run is the reference the 2 % one must match in calls and cuts."""
    config = DemoConfig(latency_ms=20, rate_429=rate_429, seed=21)
    async with run_demo_api(config) as base_url:
        async with HttpEnricher(settings(base_url)) as enrich:
            outputs = await enrich_partition(enrich, range(1000))
            stats = enrich.stats
    assert len(outputs) == 1000 and all(isinstance(o, Result) for o in outputs)
    assert stats.rate_decreases == 0 and stats.concurrency_decreases == 0
    assert stats.requests_made == 1000 + stats.throttled  # one call per 429 more
    if rate_429:
        assert 5 <= stats.throttled <= 60, stats  # the 429s did come (about 20)
    else:
        assert stats.throttled == 0
