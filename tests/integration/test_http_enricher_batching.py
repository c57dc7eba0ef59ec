"""Batching against the demo API's ``POST /customers/batch``: fewer requests, and every
record still gets exactly its own answer or failure."""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from demo.customers import customer_record
from spark_jobs.asyncwait import AsyncWaitOperator, Failure, Result
from spark_jobs.enrichers import HttpEnricher, HttpEnricherConfig, default_retry_strategy
from spark_jobs.enrichers.batch_config import BatchConfig

from .http_support import demo, server_stats

FIELDS = {"name": "$.name", "city": "$.address.city", "score": ["$.score", "float"]}


def batch_config(base_url: str, **overrides: Any) -> HttpEnricherConfig:
    settings = {
        "batch_url_template": base_url + "/customers/batch",
        "batch_size": 10,
        "batch_max_wait_s": 0.02,
        "key_field": "customer_id",
        "response_fields": FIELDS,
    }
    return HttpEnricherConfig.from_dict({**settings, **overrides})


async def run_operator(enrich: HttpEnricher, records: list, **kwargs: Any) -> list:
    operator = AsyncWaitOperator(enrich, **{"capacity": 100, **kwargs})
    return [o async for o in operator.run(records)][:-1]


def expected(customer_id: str) -> dict[str, Any]:
    record = customer_record(customer_id)
    return {"name": record["name"], "city": record["address"]["city"], "score": record["score"]}


async def test_records_share_batch_requests_and_each_gets_its_own_answer():
    ids = [f"c{i:03d}" for i in range(95)] + ["missing-1", "missing-2"]
    records = [{"customer_id": customer_id, "row": n} for n, customer_id in enumerate(ids)]
    async with demo() as (base_url, control):
        async with HttpEnricher(batch_config(base_url)) as enrich:
            outputs = await run_operator(enrich, records)
            stats = enrich.stats
        server = await server_stats(control)
    assert server["total"] == 10  # 97 records, 10 per request
    assert server["per_key"] == dict.fromkeys(ids, 1)
    assert stats.batches_sent == stats.requests_made == 10
    assert [o.record for o in outputs] == records
    for output in outputs[:95]:
        assert isinstance(output, Result)
        assert output.value == expected(output.record["customer_id"])
    assert [o.value for o in outputs[95:]] == [dict.fromkeys(FIELDS)] * 2


async def test_a_partial_batch_leaves_after_the_max_wait():
    async with demo() as (base_url, control):
        config = batch_config(base_url, batch_max_wait_s=0.2)
        async with HttpEnricher(config) as enrich:
            started = time.monotonic()
            outputs = await run_operator(enrich, [{"customer_id": f"c{i}"} for i in range(3)])
            elapsed = time.monotonic() - started
        assert (await server_stats(control))["total"] == 1
    assert 0.2 <= elapsed < 1.0
    assert [o.value for o in outputs] == [expected(f"c{i}") for i in range(3)]


async def test_missing_items_fail_per_record_with_not_found_fail():
    async with demo() as (base_url, _):
        async with HttpEnricher(batch_config(base_url, not_found="fail")) as enrich:
            records = [{"customer_id": "c1"}, {"customer_id": "missing-9"}, {"name": "no key"}]
            ok, missing, keyless = await run_operator(
                enrich, records, retry=default_retry_strategy(initial_delay=0.01)
            )
    assert isinstance(ok, Result) and ok.value == expected("c1")
    assert isinstance(missing, Failure) and missing.attempts == 1
    assert missing.error.startswith("NotFoundError: the batch item for 'missing-9'")
    assert isinstance(keyless, Failure) and keyless.attempts == 1
    assert keyless.error.startswith("MissingFieldError: key_field needs field 'customer_id'")


async def test_a_failed_batch_is_retried_record_by_record_in_later_batches():
    async with demo(outage_after_requests=0, outage_requests=1) as (base_url, control):
        async with HttpEnricher(batch_config(base_url)) as enrich:
            records = [{"customer_id": f"c{i}"} for i in range(10)]
            retry = default_retry_strategy(initial_delay=0.01, max_delay=0.05)
            outputs = await run_operator(enrich, records, retry=retry)
        server = await server_stats(control)
    assert server["by_status"]["503"] == 1
    assert all(isinstance(o, Result) and o.attempts == 2 for o in outputs)
    assert [o.value for o in outputs] == [expected(f"c{i}") for i in range(10)]
    assert server["per_key"] == {f"c{i}": 2 for i in range(10)}


async def test_a_custom_batch_shape_with_results_in_any_order():
    """Body key, result list path and id field are configurable; results are matched by id
    (as text, so integer ids match ids the server returns as strings), not by position."""
    bodies: list[Any] = []

    async def reversed_batch(request: web.Request) -> web.Response:
        body = await request.json()
        bodies.append(body)
        items = [{"key": str(k), "label": f"item {k}"} for k in reversed(body["keys"])]
        return web.json_response({"data": {"items": items}})

    app = web.Application()
    app.router.add_post("/lookup", reversed_batch)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        config = HttpEnricherConfig(
            batch=BatchConfig(
                size=4,
                url_template=f"http://127.0.0.1:{runner.addresses[0][1]}/lookup",
                request_key="keys",
                results_path="$.data.items",
                result_id_field="key",
            ),
            key_field="n",
            response_fields={"label": "$.label"},
        )
        async with HttpEnricher(config) as enrich:
            outputs = await run_operator(enrich, [{"n": n} for n in range(8)])
    finally:
        await runner.cleanup()
    assert bodies == [{"keys": [0, 1, 2, 3]}, {"keys": [4, 5, 6, 7]}]
    assert [o.value for o in outputs] == [{"label": f"item {n}"} for n in range(8)]
