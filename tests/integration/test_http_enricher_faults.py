"""The HTTP client against the failures third-party APIs really produce: each wire fault of
the demo API classified and retried, stalls cut off by the attempt's own deadlines,
healthy records never starved by stalled or throttled ones, hedged requests, and bodies
that are too large, too compressed or too deep."""

from __future__ import annotations

import asyncio
import gzip
import time
import tracemalloc
import urllib.parse
from typing import Any

import pytest
from aiohttp import web

from demo.customers import customer_record
from demo.wire_faults import stall
from spark_jobs.asyncwait import AsyncWaitOperator, Failure, Result
from spark_jobs.enrichers import (
    HttpEnricher,
    HttpEnricherConfig,
    InvalidResponseError,
    ResponseTooLargeError,
    default_retry_strategy,
)

from .http_support import demo, serve, server_stats

FIELDS = {"name": "$.name"}
FAST_RETRY = default_retry_strategy(max_attempts=5, initial_delay=0.01, max_delay=0.05)


def customers(base_url: str, **overrides: Any) -> HttpEnricherConfig:
    settings = {"url_template": base_url + "/customers/{id}", "response_fields": FIELDS}
    return HttpEnricherConfig(**{**settings, **overrides})


async def run_operator(enrich: HttpEnricher, records: list, **kwargs: Any) -> list:
    options = {"capacity": 50, "retry": FAST_RETRY, "timeout": 20, **kwargs}
    operator = AsyncWaitOperator(enrich, **options)
    return [output async for output in operator.run(records)][:-1]


@pytest.mark.parametrize(
    "fault",
    ["drop_rate", "reset_rate", "stall_rate", "bad_chunk_rate", "truncated_rate", "error_rate"],
)
async def test_every_transport_and_protocol_fault_is_retried_to_success(fault):
    async with demo(**{fault: 1.0}, fault_attempts=1) as (base_url, control):
        async with HttpEnricher(customers(base_url, read_timeout=0.3)) as enrich:
            outputs = await run_operator(enrich, [{"id": "c1"}, {"id": "c2"}])
        stats = await server_stats(control)
    assert outputs and all(isinstance(o, Result) and o.attempts == 2 for o in outputs), outputs
    assert {o.value["name"] for o in outputs} == {customer_record(k)["name"] for k in ("c1", "c2")}
    assert stats["per_key"] == {"c1": 2, "c2": 2}


@pytest.mark.parametrize(
    ("fault", "reason"), [("bad_request_rate", "HTTP 400"), ("cut_json_rate", "invalid JSON")]
)
async def test_records_that_can_never_succeed_are_called_once_and_say_why(fault, reason):
    async with demo(**{fault: 1.0}) as (base_url, control):
        async with HttpEnricher(customers(base_url)) as enrich:
            [output] = await run_operator(enrich, [{"id": "c1"}])
        stats = await server_stats(control)
    assert isinstance(output, Failure) and not output.transient
    assert reason in output.error and output.attempts == 1
    assert stats["per_key"] == {"c1": 1}


@pytest.mark.parametrize("status", [408, 425])
async def test_request_timeout_and_too_early_are_retried(status):
    calls: list[str] = []

    async def first_refused(request: web.Request) -> web.Response:
        calls.append(request.path)
        if len(calls) == 1:
            return web.json_response({}, status=status)
        return web.json_response({"name": "ok"})

    async with serve(first_refused) as base_url:
        async with HttpEnricher(customers(base_url)) as enrich:
            [output] = await run_operator(enrich, [{"id": "c1"}])
    assert output == Result({"id": "c1"}, {"name": "ok"}, 2)


async def test_a_stalled_body_is_cut_at_the_read_timeout_and_retried_long_before_the_budget():
    async with demo(stall_rate=1.0, fault_attempts=1) as (base_url, _):
        async with HttpEnricher(customers(base_url, read_timeout=0.3)) as enrich:
            started = time.monotonic()
            [output] = await run_operator(enrich, [{"id": "c1"}], timeout=10)
    assert isinstance(output, Result) and output.attempts == 2
    assert time.monotonic() - started < 5  # one read_timeout and a retry, not the budget


async def test_a_stall_delays_an_ordered_partition_by_about_one_attempt_deadline():
    """Ordered mode: everything behind the stalled head waits; only for one stall."""
    async with demo(stall_rate=0.05, fault_attempts=1, latency_ms=5) as (base_url, control):
        records = [{"id": f"c{i}"} for i in range(200)]
        # A rate far above loopback's: the slow start's pacing is not what this measures.
        settings = customers(base_url, read_timeout=0.5, requests_per_second=100_000)
        async with HttpEnricher(settings) as enrich:
            started = time.monotonic()
            outputs = await run_operator(enrich, records, mode="ordered", capacity=200)
            elapsed = time.monotonic() - started
        stats = await server_stats(control)
    stalled = stats["by_status"]["stall"]
    assert stalled >= 3  # several stalls, overlapping in one round of requests
    assert [o.record for o in outputs] == records
    assert all(isinstance(o, Result) for o in outputs)
    assert elapsed < 0.5 * 4  # the overlapping stalls cost about one read_timeout


async def test_healthy_records_never_time_out_behind_stalled_ones():
    """Two slots, both taken by stalled requests: the healthy records wait for a slot
    without their timer running, and are answered once the stalled ones give up."""

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.path.startswith("/customers/stuck"):
            return await stall(request, web.json_response({"name": "never"}))
        return web.json_response({"name": request.path.rsplit("/", 1)[1]})

    records = [{"id": "stuck1"}, {"id": "stuck2"}] + [{"id": f"ok{i}"} for i in range(20)]
    async with serve(handler) as base_url:
        # The stalled attempts hold both slots for their record's whole timeout (1 s).
        settings = customers(base_url, capacity=2, read_timeout=30, total_timeout=30)
        async with HttpEnricher(settings) as enrich:
            outputs = await run_operator(
                enrich, records, capacity=50, timeout=1.0, retry=None, mode="unordered"
            )
    by_id = {o.record["id"]: o for o in outputs}
    assert all(isinstance(by_id[f"ok{i}"], Result) for i in range(20)), outputs
    assert all(isinstance(by_id[k], Failure) for k in ("stuck1", "stuck2"))


async def test_isolated_429s_do_not_shrink_the_concurrency():
    async with demo(rate_429=0.02, retry_after_s=0, fault_attempts=1) as (base_url, _):
        async with HttpEnricher(customers(base_url, capacity=32)) as enrich:
            records = [{"id": f"c{i}"} for i in range(2_000)]
            outputs = await run_operator(enrich, records, capacity=32)
            stats = enrich.stats
    assert all(isinstance(o, Result) for o in outputs)
    assert stats.throttled >= 20
    assert stats.concurrency_decreases == 0 and stats.current_concurrency_limit == 32


async def test_a_hedged_request_answers_a_slow_first_call():
    """The first call of each key stalls; with hedge_after the second one answers it,
    the slow one is cancelled, and both are counted."""
    async with demo(stall_rate=1.0, fault_attempts=1) as (base_url, control):
        settings = customers(base_url, hedge_after=0.1, read_timeout=10)
        async with HttpEnricher(settings) as enrich:
            started = time.monotonic()
            outputs = await run_operator(enrich, [{"id": "c1"}, {"id": "c2"}])
            elapsed = time.monotonic() - started
            stats = enrich.stats
        server = await server_stats(control)
    assert all(isinstance(o, Result) and o.attempts == 1 for o in outputs)
    assert elapsed < 5  # far below the 10 s read_timeout the stall would have cost
    assert stats.hedges_sent == 2 and stats.requests_made == 4
    assert server["per_key"] == {"c1": 2, "c2": 2}


async def test_percentile_hedging_waits_for_enough_latencies():
    async with demo(latency_ms=5) as (base_url, _):
        settings = customers(base_url, hedge_after="p90")
        async with HttpEnricher(settings) as enrich:
            await run_operator(enrich, [{"id": f"c{i}"} for i in range(100)], capacity=4)
            stats = enrich.stats
    # No hedge before the percentile is known (32 answers: hedging.py); after it, a
    # hedge only for a call slower than the p90 (how many a busy machine's stalls make
    # is not this test's to bound), never one per record.
    assert stats.requests_made == 100 + stats.hedges_sent
    assert stats.hedges_sent <= 100 - 32


async def test_a_huge_body_and_a_gzip_bomb_stop_at_the_cap_without_the_memory():
    bomb = gzip.compress(b'{"name": "' + b"0" * (200 * 2**20) + b'"}', compresslevel=9)
    chunk = 64 * 2**10

    async def handler(request: web.Request) -> web.StreamResponse:
        """Streams (so the server's own buffers stay small and out of the measure)."""
        huge = request.path.endswith("plain")
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        if not huge:
            response.headers["Content-Encoding"] = "gzip"
        await response.prepare(request)
        try:
            if huge:
                for _ in range(40 * 2**20 // chunk):  # 40 MiB of one long string
                    await response.write(b"x" * chunk)
            else:
                for start in range(0, len(bomb), chunk):
                    await response.write(bomb[start : start + chunk])
        except (ConnectionResetError, RuntimeError):
            pass  # the client stopped reading at its cap and closed
        return response

    async with serve(handler) as base_url:
        settings = customers(base_url, max_response_bytes=2**20)
        async with HttpEnricher(settings) as enrich:
            tracemalloc.start()
            for key in ("plain", "bomb"):
                with pytest.raises(ResponseTooLargeError, match=r"max_response_bytes \(1048576"):
                    await enrich({"id": key})
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
    assert len(bomb) < 2**20  # a small download that would decompress to 200 MiB
    assert peak < 8 * 2**20, f"peak {peak / 2**20:.1f} MiB"


async def test_json_nested_too_deep_is_an_invalid_response():
    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=b"[" * 200_000 + b"]" * 200_000, content_type="application/json")

    async with serve(handler) as base_url:
        async with HttpEnricher(customers(base_url)) as enrich:
            with pytest.raises(InvalidResponseError, match="nested too deeply"):
                await enrich({"id": "c1"})


async def test_stalled_requests_are_cancelled_with_their_record():
    """No request outlives its record: after a timeout the stalled connection is closed."""
    closed = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        await stall(request, web.json_response({"name": "never"}))
        closed.set()
        return web.Response()

    async with serve(handler) as base_url:
        async with HttpEnricher(customers(base_url, read_timeout=30)) as enrich:
            [output] = await run_operator(enrich, [{"id": "c1"}], timeout=0.3, retry=None)
            await asyncio.wait_for(closed.wait(), 10)
    assert isinstance(output, Failure) and "TimeoutError" in output.error


@pytest.mark.parametrize("key", ["..", ".", "..;", "%2e%2e", "/", "?", "#", "a b", "ü"])
async def test_a_record_value_never_changes_the_url_path(key):
    """The server records the raw request path: the value stays one path segment, so a
    key of ``..`` cannot send the call (and its token) to another endpoint."""
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.raw_path)
        return web.json_response({"name": "ok"})

    async with serve(handler) as base_url:
        settings = HttpEnricherConfig(
            url_template=base_url + "/v1/customers/{id}/profile", response_fields=FIELDS
        )
        async with HttpEnricher(settings) as enrich:
            assert await enrich({"id": key}) == {"name": "ok"}
    [raw_path] = seen
    assert raw_path.startswith("/v1/customers/") and raw_path.endswith("/profile"), raw_path
    assert raw_path.count("/") == 4, raw_path  # the value is exactly one segment
    assert urllib.parse.unquote(raw_path.split("/")[3]) == key
