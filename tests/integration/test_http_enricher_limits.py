"""The client-side limits on loopback: the job's request budget and the concurrency cap."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp import web

from spark_jobs.asyncwait import AsyncWaitOperator, Result
from spark_jobs.enrichers import HttpEnricher, HttpEnricherConfig, default_retry_strategy

from .http_support import serve


def config(base_url: str, **overrides) -> HttpEnricherConfig:
    settings = {"url_template": base_url + "/items/{id}", "response_fields": {"id": "$.id"}}
    return HttpEnricherConfig(**{**settings, **overrides})


async def run_partition(enrich: HttpEnricher, ids: range, retry=None) -> list:
    operator = AsyncWaitOperator(enrich, mode="unordered", capacity=50, retry=retry)
    return [o async for o in operator.run({"id": i} for i in ids)][:-1]


async def test_two_partitions_together_stay_within_the_jobs_budget():
    """100 requests/s for the job, split over 2 partitions; every 5th call fails once and
    its retry takes a token too, so the server sees the budget, retries included."""
    arrivals: list[float] = []
    failed: set[str] = set()

    async def handler(request: web.Request) -> web.Response:
        arrivals.append(time.monotonic())
        item = request.match_info["tail"].rsplit("/", 1)[-1]
        if int(item) % 5 == 0 and item not in failed:
            failed.add(item)
            return web.json_response({"error": "flaky"}, status=500)
        return web.json_response({"id": item})

    async with serve(handler) as base_url:
        settings = config(base_url, requests_per_second=100, partitions=2)
        retry = default_retry_strategy(initial_delay=0.01, max_delay=0.05)
        async with HttpEnricher(settings) as first, HttpEnricher(settings) as second:
            outputs = await asyncio.gather(
                run_partition(first, range(0, 100), retry),
                run_partition(second, range(100, 200), retry),
            )
            made = first.stats.requests_made + second.stats.requests_made
    assert all(isinstance(o, Result) for part in outputs for o in part)
    assert len(arrivals) == made == 240  # 200 records + 40 retries
    rate = (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])
    assert arrivals[-1] - arrivals[0] >= 2.0
    assert rate == pytest.approx(100, rel=0.10)


async def test_429s_leave_the_concurrency_cap_alone():
    """Throttling is the rate controller's: sustained 429s cut the rate, never the cap,
    and the server never sees more than the capacity at once."""
    state = {"throttle": True, "in_flight": 0}
    concurrency_seen: list[int] = []

    async def handler(request: web.Request) -> web.Response:
        state["in_flight"] += 1
        concurrency_seen.append(state["in_flight"])
        try:
            await asyncio.sleep(0.01)
            if state["throttle"]:
                return web.json_response({}, status=429, headers={"Retry-After": "0"})
            return web.json_response({"id": "ok"})
        finally:
            state["in_flight"] -= 1

    async with serve(handler) as base_url:
        settings = config(base_url, capacity=16, requests_per_second=100_000)
        async with HttpEnricher(settings) as enrich:
            throttled = await asyncio.gather(
                *(enrich({"id": i}) for i in range(64)), return_exceptions=True
            )
            after_throttling = enrich.stats
            state["throttle"] = False
            await asyncio.gather(*(enrich({"id": i}) for i in range(1000, 1064)))
    assert all(type(e).__name__ == "ThrottledError" for e in throttled)
    assert after_throttling.throttled == 64 and after_throttling.rate_decreases >= 1
    assert after_throttling.current_concurrency_limit == 16
    assert after_throttling.concurrency_decreases == 0
    assert max(concurrency_seen) == 16


async def test_throttled_retries_through_the_operator_feed_the_slowdown():
    seen: dict[str, int] = {}

    async def first_attempt_throttled(request: web.Request) -> web.Response:
        item = request.match_info["tail"]
        seen[item] = seen.get(item, 0) + 1
        if seen[item] == 1:
            return web.json_response({}, status=429, headers={"Retry-After": "0"})
        return web.json_response({"id": item})

    async with serve(first_attempt_throttled) as base_url:
        settings = config(base_url, capacity=32, requests_per_second=100_000)
        async with HttpEnricher(settings) as enrich:
            retry = default_retry_strategy(initial_delay=0.01, max_delay=0.05)
            outputs = await run_partition(enrich, range(100), retry)
            stats = enrich.stats
    # The throttled first calls spent no attempt: each record counts only its success.
    assert all(isinstance(o, Result) and o.attempts == 1 for o in outputs)
    assert stats.requests_made == 200 and stats.throttled == 100
    assert stats.rate_decreases >= 1 and stats.concurrency_decreases == 0
