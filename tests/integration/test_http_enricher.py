"""HttpEnricher against real servers on loopback: every status path, transport failures,
Retry-After with the operator, coalescing and the cache.

The demo API serves the realistic cases; small aiohttp servers written here serve the
cases that need an exact behaviour (a status with a given header, a body cut short).
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any

import pytest
from aiohttp import web

from demo.customers import customer_record
from spark_jobs.asyncwait import AsyncWaitOperator, Failure, Result
from spark_jobs.enrichers import (
    AccountError,
    ClientStatusError,
    HttpEnricher,
    HttpEnricherConfig,
    InvalidResponseError,
    NotFoundError,
    RetryableError,
    ServerError,
    ThrottledError,
    TransportError,
    default_retry_strategy,
    is_retryable,
)

from .http_support import demo, serve, server_stats

FIELDS = {
    "name": "$.name",
    "score": ["$.score", "float"],
    "city": "$.address.city",
    "address": ["$.address", "json"],
    "absent": "$.no.such[0].field",
}


def customers(base_url: str, **overrides: Any) -> HttpEnricherConfig:
    settings = {"url_template": base_url + "/customers/{id}", "response_fields": FIELDS}
    return HttpEnricherConfig(**{**settings, **overrides})


async def run_operator(enrich: HttpEnricher, records: list, **kwargs: Any) -> list:
    operator = AsyncWaitOperator(enrich, **{"capacity": 50, **kwargs})
    return [output async for output in operator.run(records)][:-1]  # drop the end watermark


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- 2xx and 404 ----------------------------------------------------------------------


async def test_typed_fields_from_the_demo_api():
    async with demo() as (base_url, _):
        async with HttpEnricher(customers(base_url)) as enrich:
            output = await enrich({"id": "c000042", "other": "kept out"})
    expected = customer_record("c000042")
    assert output == {
        "name": expected["name"],
        "score": expected["score"],
        "city": expected["address"]["city"],
        "address": json.dumps(expected["address"], separators=(",", ":")),
        "absent": None,
    }
    assert isinstance(output["score"], float)


async def test_404_gives_nulls_or_a_permanent_failure():
    async with demo() as (base_url, _):
        async with HttpEnricher(customers(base_url)) as enrich:
            assert await enrich({"id": "missing-1"}) == dict.fromkeys(FIELDS)
        async with HttpEnricher(customers(base_url, not_found="fail")) as enrich:
            with pytest.raises(NotFoundError, match=r"HTTP 404 from GET .*/customers/missing-2"):
                await enrich({"id": "missing-2"})
            [failure] = await run_operator(
                enrich, [{"id": "missing-3"}], retry=default_retry_strategy(initial_delay=0.01)
            )
    assert isinstance(failure, Failure) and failure.attempts == 1
    assert failure.error.startswith("NotFoundError: HTTP 404")


# -- every other status ---------------------------------------------------------------


async def answer_status(request: web.Request) -> web.Response:
    """``/status/<code>``: that status, with Retry-After: 2 on 429 and 503."""
    status = int(request.match_info["tail"].rsplit("/", 1)[-1])
    headers = {"Retry-After": "2"} if status in (429, 503) else {}
    return web.json_response({"status": status, "name": "n"}, status=status, headers=headers)


@pytest.mark.parametrize(
    ("status", "error_type", "retry_after"),
    [
        (200, None, None),
        (204, InvalidResponseError, None),  # 2xx without a JSON body
        (400, ClientStatusError, None),
        (401, AccountError, None),
        (403, ClientStatusError, None),
        (409, ClientStatusError, None),
        (422, ClientStatusError, None),
        (429, ThrottledError, 2.0),
        (500, ServerError, None),
        (502, ServerError, None),
        (503, ThrottledError, 2.0),
        (504, ServerError, None),
    ],
)
async def test_status_paths(status, error_type, retry_after):
    async with serve(answer_status) as base_url:
        config = HttpEnricherConfig(
            url_template=base_url + "/status/{code}", response_fields={"name": "$.name"}
        )
        async with HttpEnricher(config) as enrich:
            if error_type is None:
                assert await enrich({"code": status}) == {"name": "n"}
            else:
                with pytest.raises(error_type) as caught:
                    await enrich({"code": status})
                error = caught.value
                assert is_retryable(error) is isinstance(error, RetryableError)
                assert enrich.retry_predicate(error) is is_retryable(error)
                assert getattr(error, "retry_after", None) == retry_after
                if error_type is AccountError:  # the provider's answer, then the call
                    assert str(error).startswith(f"HTTP {status}: ")
                    assert str(error).endswith(f"(GET {base_url}/status/{status})")
                elif status != 204:
                    assert f"HTTP {status} from GET {base_url}/status/{status}" in str(error)
            stats = enrich.stats
    assert stats.requests_made == 1
    assert stats.responses_by_status == {status: 1}
    assert stats.throttled == (1 if status == 429 else 0)
    assert stats.retryable_errors == (1 if status in (429, 500, 502, 503, 504) else 0)


async def test_retry_after_is_honoured_between_the_429_and_the_retry():
    arrivals: list[float] = []

    async def throttle_first(request: web.Request) -> web.Response:
        arrivals.append(time.monotonic())
        if len(arrivals) == 1:
            return web.json_response({}, status=429, headers={"Retry-After": "1"})
        return web.json_response({"name": "ok"})

    async with serve(throttle_first) as base_url:
        config = HttpEnricherConfig(
            url_template=base_url + "/x/{id}", response_fields={"name": "$.name"}
        )
        async with HttpEnricher(config) as enrich:
            retry = default_retry_strategy(initial_delay=0.01)
            [result] = await run_operator(enrich, [{"id": 1}], retry=retry)
    assert result == Result({"id": 1}, {"name": "ok"}, 1)  # the 429 spent no attempt
    assert 1.0 <= arrivals[1] - arrivals[0] < 1.5


async def test_an_outage_is_retried_until_it_ends():
    async with demo(outage_after_requests=0, outage_requests=2) as (base_url, control):
        async with HttpEnricher(customers(base_url)) as enrich:
            retry = default_retry_strategy(initial_delay=0.01)
            [result] = await run_operator(enrich, [{"id": "c1"}], retry=retry)
            stats = enrich.stats
        assert (await server_stats(control))["by_status"] == {"503": 2, "200": 1}
    assert isinstance(result, Result) and result.attempts == 3
    assert result.value["name"] == customer_record("c1")["name"]
    assert stats.responses_by_status == {503: 2, 200: 1}
    assert stats.retryable_errors == 2 and stats.throttled == 0


async def test_the_last_minutes_answers_are_counted_by_status_and_providers_code():
    """What a progress line names (``call_outcomes.py``): OpenAI's documented 429 body
    (its ``rate_limit_exceeded`` code), a bare 503, then the answer."""
    answers = iter(
        [
            web.json_response(
                {
                    "error": {
                        "message": "Rate limit reached for requests",
                        "type": "requests",
                        "param": None,
                        "code": "rate_limit_exceeded",
                    }
                },
                status=429,
                headers={"Retry-After": "0"},
            ),
            web.Response(status=503, text="busy"),
        ]
    )

    async def flaky(request: web.Request) -> web.Response:
        return next(answers, None) or web.json_response({"name": "ok"})

    async with serve(flaky) as base_url:
        config = HttpEnricherConfig(
            url_template=base_url + "/x/{id}", response_fields={"name": "$.name"}
        )
        async with HttpEnricher(config) as enrich:
            retry = default_retry_strategy(initial_delay=0.01)
            [result] = await run_operator(enrich, [{"id": 1}], retry=retry)
            recent = enrich.recent_calls()
    assert isinstance(result, Result)
    assert recent == {"429 rate_limit_exceeded": 1, "503": 1, "200": 1}


# -- bodies that are not what they should be ------------------------------------------


async def test_invalid_json_fails_with_a_short_snippet():
    async def html(request: web.Request) -> web.Response:
        return web.Response(text="<html><body>" + "Bad gateway page " * 100, status=200)

    async with serve(html) as base_url:
        config = HttpEnricherConfig(url_template=base_url + "/{id}", response_fields=FIELDS)
        async with HttpEnricher(config) as enrich:
            retry = default_retry_strategy(initial_delay=0.01)
            [failure] = await run_operator(enrich, [{"id": 1}], retry=retry)
    assert isinstance(failure, Failure) and failure.attempts == 1  # permanent: no retry
    assert failure.error.startswith("InvalidResponseError: invalid JSON from GET")
    quoted = failure.error.split(": ", 2)[2]
    assert "<html><body>Bad gateway page" in quoted
    assert len(quoted) <= 200 + 2  # the snippet and its quotes


async def test_a_value_of_the_wrong_type_is_a_permanent_failure():
    async with demo() as (base_url, _):
        config = customers(base_url, response_fields={"name": ["$.name", "int"]})
        async with HttpEnricher(config) as enrich:
            with pytest.raises(InvalidResponseError, match=r"response field name \(\$\.name\)"):
                await enrich({"id": "c1"})


async def test_a_missing_template_field_fails_the_record_without_a_request():
    async with demo() as (base_url, control):
        async with HttpEnricher(customers(base_url, key_field="order")) as enrich:
            outputs = await run_operator(
                enrich,
                [{"order": "o-1", "customer": "c1"}, {"id": "c2"}],
                retry=default_retry_strategy(initial_delay=0.01),
            )
        assert (await server_stats(control))["total"] == 1
    failure, result = outputs
    assert isinstance(failure, Failure) and failure.attempts == 1
    assert failure.error == (
        "MissingFieldError: url_template needs field 'id', which record order='o-1' lacks "
        "(its fields: customer, order)"
    )
    assert isinstance(result, Result)


async def test_post_with_a_body_template():
    seen: list[tuple[str, str, Any]] = []

    async def echo(request: web.Request) -> web.Response:
        seen.append((request.method, request.content_type, await request.json()))
        return web.json_response({"tier": "gold"})

    async with serve(echo) as base_url:
        config = HttpEnricherConfig(
            method="POST",
            url_template=base_url + "/score",
            body_template={"customer": {"id": "{id}", "label": "id {id}"}},
            response_fields={"tier": "$.tier"},
        )
        async with HttpEnricher(config) as enrich:
            assert await enrich({"id": 7}) == {"tier": "gold"}
    assert seen == [("POST", "application/json", {"customer": {"id": 7, "label": "id 7"}})]


# -- transport failures -----------------------------------------------------------------


async def test_dropped_connections_are_retryable_and_counted_once_per_call():
    """aiohttp would silently resend each GET once; the enricher must not let it."""
    async with demo(drop_rate=1.0) as (base_url, control):
        async with HttpEnricher(customers(base_url)) as enrich:
            for n in range(3):
                with pytest.raises(TransportError, match="ServerDisconnectedError") as caught:
                    await enrich({"id": f"c{n}"})
                assert is_retryable(caught.value)
            stats = enrich.stats
        server = await server_stats(control)
    assert server["by_status"] == {"dropped": 3}
    assert stats.requests_made == 3 and stats.retryable_errors == 3
    assert stats.responses_by_status == {}


async def test_a_body_cut_short_is_retryable():
    async def cut(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.content_length = 1000
        await response.prepare(request)
        await response.write(b'{"name": "trunc')
        assert request.transport is not None
        request.transport.close()
        return response

    async with serve(cut) as base_url:
        config = HttpEnricherConfig(url_template=base_url + "/{id}", response_fields=FIELDS)
        async with HttpEnricher(config) as enrich:
            with pytest.raises(TransportError, match="ClientPayloadError"):
                await enrich({"id": 1})


async def test_a_slow_body_hits_the_read_timeout():
    async with demo(slow_body_rate=1.0, slow_body_s=1.0) as (base_url, _):
        async with HttpEnricher(customers(base_url, read_timeout=0.05)) as enrich:
            started = time.monotonic()
            with pytest.raises(TransportError, match="stalled for read_timeout") as caught:
                await enrich({"id": "c1"})
    assert time.monotonic() - started < 0.5
    assert is_retryable(caught.value)


async def test_without_a_read_timeout_the_total_timeout_bounds_a_slow_body():
    async with demo(slow_body_rate=1.0, slow_body_s=1.0) as (base_url, _):
        settings = customers(base_url, read_timeout=None, total_timeout=0.2)
        async with HttpEnricher(settings) as enrich:
            with pytest.raises(TransportError, match="total_timeout"):
                await enrich({"id": "c1"})


async def test_a_slow_answer_hits_the_total_timeout():
    async with demo(latency_ms=600) as (base_url, _):
        async with HttpEnricher(customers(base_url, total_timeout=0.1)) as enrich:
            with pytest.raises(TransportError, match="total_timeout"):
                await enrich({"id": "c1"})


async def test_connection_refused_is_retryable():
    config = customers(f"http://127.0.0.1:{closed_port()}")
    async with HttpEnricher(config) as enrich:
        with pytest.raises(TransportError, match="ClientConnectorError") as caught:
            await enrich({"id": "c1"})
    assert is_retryable(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


# -- the session ----------------------------------------------------------------------


async def test_one_session_whose_pool_matches_the_capacity():
    async with demo() as (base_url, _):
        enrich = HttpEnricher(customers(base_url, capacity=7))
        async with enrich:
            session = enrich._session
            assert session is not None
            assert session.connector.limit == 7 and session.connector.limit_per_host == 7
            await asyncio.gather(*(enrich({"id": f"c{i}"}) for i in range(20)))
            assert enrich._session is session
            assert "open" in repr(enrich)
        assert session.closed and "closed" in repr(enrich)


# -- coalescing and the cache -----------------------------------------------------------


async def test_identical_requests_in_flight_share_one_call_then_hit_the_cache():
    ids = ["c1", "c2", "c3", "c4"]
    records = [{"id": ids[i % 4], "n": i} for i in range(40)]
    async with demo(latency_ms=50) as (base_url, control):
        async with HttpEnricher(customers(base_url)) as enrich:
            first = await run_operator(enrich, records, capacity=40)
            assert (await server_stats(control))["per_key"] == dict.fromkeys(ids, 1)
            assert enrich.stats.calls_saved_by_coalescing == 36
            assert enrich.stats.cache_hits == 0
            second = await run_operator(enrich, records[:8], capacity=40)
            stats = enrich.stats
        assert (await server_stats(control))["total"] == 4
    assert stats.cache_hits == 8 and stats.requests_made == 4
    for output in [*first, *second]:
        assert output.value["name"] == customer_record(output.record["id"])["name"]
    # Callers get their own dicts: changing one changes no other answer.
    first[0].value["name"] = "changed"
    assert first[4].value["name"] == customer_record("c1")["name"]


async def test_the_cache_is_bounded_and_both_savings_can_be_switched_off():
    async with demo(latency_ms=20) as (base_url, control):
        async with HttpEnricher(customers(base_url, cache_size=2)) as enrich:
            for customer in ["a", "b", "c", "a", "c"]:
                await enrich({"id": customer})
        assert (await server_stats(control))["per_key"] == {"a": 2, "b": 1, "c": 1}
        assert enrich.stats.cache_hits == 1
        await control.post("/stats/reset")
        config = customers(base_url, cache_size=0, coalesce=False)
        async with HttpEnricher(config) as enrich:
            await asyncio.gather(*(enrich({"id": "a"}) for _ in range(5)))
            await enrich({"id": "a"})
        assert (await server_stats(control))["per_key"] == {"a": 6}
        assert enrich.stats.calls_saved_by_coalescing == 0
        assert enrich.stats.cache_hits == 0
