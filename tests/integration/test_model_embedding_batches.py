"""Embeddings many inputs a request, against the demo model endpoint on loopback (no
Spark): every record's output as with one input a request, only the refused input a dead
letter, each record kept in the cross-run cache on its own (answering either mode), and
a request charged once with the sum of its inputs' tokens."""

from __future__ import annotations

import asyncio
import json
import math
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web

from demo.model_api import ModelApi, run_model_api
from demo.provider_profiles import OpenAIProfile
from spark_jobs.asyncwait import AsyncWaitOperator, Failure, Result
from spark_jobs.enrichers import HttpEnricher, HttpEnricherConfig, default_retry_strategy
from spark_jobs.enrichers.model_endpoint import (
    ModelAnswers,
    ModelConfig,
    ModelPacing,
    request_options,
)
from spark_jobs.enrichers.model_endpoint.embedding_batches import embedding_batches
from spark_jobs.partition_runner.cache_scope import scope_of
from spark_jobs.partition_runner.response_cache import ResponseCache

CAPACITY = 64


def embeddings(**given: Any) -> ModelConfig:
    return ModelConfig(model="demo-embed", prompt="{title}", api="embeddings", **given)


@asynccontextmanager
async def embedder(base_url: str, config: ModelConfig, stored: Any = None, **given: Any):
    """The enricher a model run opens for embeddings (``row_enrichment.py``'s wiring)."""
    options: dict[str, Any] = {
        "url_template": base_url + "/embeddings",
        "response_fields": {"unused": "$.unused"},
        "partitions": 1,
        "cache_size": 0,
        "capacity": CAPACITY,
        **given,
    }
    options.update(request_options(config, options))
    http = HttpEnricherConfig.from_dict(options)
    pacing = ModelPacing(config, 1)
    calls = embedding_batches(config, 1)
    async with HttpEnricher(
        http, stored, answers=ModelAnswers(config), pacing=pacing, calls=calls
    ) as enrich:
        yield enrich, pacing


async def run(enrich, records: list[dict]) -> list[Any]:
    """Each record's output, or its failure as (class name, message); ``CAPACITY`` at
    once, as the operator keeps them in flight."""
    slots = asyncio.Semaphore(CAPACITY)

    async def one(record: dict) -> Any:
        async with slots:
            try:
                return await enrich(record)
            except Exception as error:
                return type(error).__name__, str(error)

    return await asyncio.gather(*(one(r) for r in records))


def titles(n: int) -> list[dict]:
    return [{"title": f"message {i} " + "word " * (i % 23)} for i in range(n)]


async def test_batched_embeddings_are_the_output_of_one_input_a_request():
    records = titles(400)
    outputs, requests = {}, {}
    for inputs in (1, None):
        api = ModelApi()
        async with run_model_api(api) as base:
            async with embedder(base, embeddings(inputs_per_request=inputs)) as (enrich, _):
                outputs[inputs] = await run(enrich, records)
        requests[inputs] = api.stats["requests"]
        assert api.stats["inputs"] == len(records), "every input paid once"
        assert set(api.calls_by_prompt.values()) == {1}
    assert outputs[None] == outputs[1]
    assert all(isinstance(o, dict) and o["prompt_tokens"] > 0 for o in outputs[None])
    assert requests[1] == len(records)
    assert requests[None] <= math.ceil(len(records) / CAPACITY) + 2, requests


async def test_one_refused_input_among_many_is_the_only_dead_letter():
    records = titles(120)
    records[17] = {"title": ""}  # OpenAI refuses an empty input
    records[90] = {"title": "long " * 9000}  # over the model's 8 192 tokens an input
    api = ModelApi()
    async with run_model_api(api) as base:
        async with embedder(base, embeddings(inputs_per_request=1)) as (enrich, _):
            alone = await run(enrich, records)
        refused_alone = api.stats["bad_requests"]
        async with embedder(base, embeddings()) as (enrich, _):
            batched = await run(enrich, records)
    failed = [i for i, o in enumerate(batched) if not isinstance(o, dict)]
    assert failed == [17, 90]
    assert batched[17][0] == batched[90][0] == "ClientStatusError"
    assert (
        "is invalid: an input is a non-empty string" in batched[17][1]
        and "too long" in batched[90][1]
    )
    assert batched == alone, "each record, the refused ones too, as when asked alone"
    refused_batched = api.stats["bad_requests"] - refused_alone
    assert refused_alone == 2
    # halving down to each refused input: at most 2 log2(CAPACITY) + 1 refusals each
    assert refused_batched <= 2 * (2 * math.log2(CAPACITY) + 1), refused_batched


async def test_each_record_is_kept_in_the_cache_and_answers_either_mode(tmp_path):
    def cache() -> ResponseCache:
        stored = ResponseCache(
            str(tmp_path), partition=0, partitions=1, ttl_s=3600, scope=scope_of(b"k" * 32, {}, [])
        )
        stored.load()
        return stored

    api = ModelApi()
    first, more = titles(150), titles(300)
    async with run_model_api(api) as base:
        outputs = {}
        for name, config, records, paid in (
            ("batched", embeddings(), first, 150),
            ("alone, cached", embeddings(inputs_per_request=1), first, 150),
            ("alone, new ones", embeddings(inputs_per_request=1), more[:200], 200),
            ("batched, cached", embeddings(), more, 300),
        ):
            stored = cache()
            async with embedder(base, config, stored) as (enrich, _):
                outputs[name] = await run(enrich, records)
            stored.flush()
            assert api.stats["inputs"] == paid, f"{name}: paid {api.stats['inputs']}"
    assert outputs["alone, cached"] == outputs["batched"]
    assert outputs["batched, cached"][:150] == outputs["batched"]
    assert outputs["batched, cached"][:200] == outputs["alone, new ones"]


@pytest.mark.parametrize("tokens_per_request", [None, 600])
async def test_a_request_is_paced_once_with_the_sum_of_its_inputs_tokens(tokens_per_request):
    api = ModelApi()
    records = titles(256)
    config = embeddings(tokens_per_request=tokens_per_request)
    async with run_model_api(api) as base:
        async with embedder(base, config) as (enrich, pacing):
            outputs = await run(enrich, records)
    sent = api.stats["requests"]
    assert all(isinstance(o, dict) for o in outputs)
    assert sent == api.stats["charged_requests"] < len(records) / 8, "one request each"
    assert (
        pacing.prompt_tokens
        == api.stats["prompt_tokens"]
        == sum(o["prompt_tokens"] for o in outputs)
    )
    if tokens_per_request:  # the estimate is the demo's count: no request above the budget
        assert max(call.tokens for call in api.timeline) <= tokens_per_request
        assert sent >= api.stats["prompt_tokens"] / tokens_per_request


async def test_a_request_s_answer_may_be_as_large_as_the_cap_an_input():
    """Each input's answer is capped as when asked alone: a request of many inputs may
    answer that many times ``max_response_bytes`` (a real one: about 30 KiB an input)."""
    api = ModelApi(embedding_dim=64)
    records = titles(128)
    async with run_model_api(api) as base:
        async with embedder(base, embeddings(), max_response_bytes=1500) as (enrich, _):
            outputs = await run(enrich, records)
    assert all(isinstance(o, dict) and len(o["embedding"]) == 64 for o in outputs), outputs[0]
    assert api.stats["requests"] <= math.ceil(len(records) / CAPACITY) + 2


async def test_an_unusable_part_of_a_batch_answer_fails_only_its_own_record():
    """A server answering some inputs wrongly (a vector of NaN, one left out, one not a
    list): those records fail as unusable answers, their neighbours are answered."""

    async def answer(request: web.Request) -> web.Response:
        inputs = (await request.json())["input"]
        data = []
        for index, text in enumerate(inputs):
            vector: Any = [0.5, -0.25]
            if text == "nan":
                vector = [float("nan"), 1.0]
            elif text == "not a list":
                vector = {"x": 1}
            if text != "left out":
                data.append({"index": index, "embedding": vector})
        usage = {"prompt_tokens": 10 * len(inputs), "total_tokens": 10 * len(inputs)}
        return web.Response(text=json.dumps({"data": data, "usage": usage}))

    app = web.Application()
    app.router.add_post("/v1/embeddings", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    records = [{"title": t} for t in ("a", "nan", "b", "left out", "not a list", "c")]
    try:
        async with embedder(base, embeddings()) as (enrich, _):
            outputs = await run(enrich, records)
    finally:
        await runner.cleanup()
    kinds = [o[0] if isinstance(o, tuple) else "ok" for o in outputs]
    assert kinds == ["ok", "InvalidResponseError", "ok"] + ["InvalidResponseError"] * 2 + ["ok"]
    assert "(input 3 of 6)" in outputs[3][1]
    # the usage of 60 shared by the estimates 1, 1, 1, 2, 3, 1 (4 characters a token)
    assert outputs[0] == {"embedding": [0.5, -0.25], "prompt_tokens": 7, "completion_tokens": 0}


async def test_a_throttled_request_s_records_retry_on_their_own_and_each_is_paid_once():
    """Under a request limit of 5 a second (no headers learned yet at the start, so the
    first requests are refused), each refused request's records are retried by the
    operator and join later requests: no dead letter, each input paid once."""
    profile = OpenAIProfile(requests=5, minute_s=1.0, retry_after=True)
    api = ModelApi(profile=profile, latency_s=0.2)  # several requests out before an answer
    records = titles(300)
    async with run_model_api(api) as base:
        config = embeddings(inputs_per_request=10, limits_window_s=1.0)
        async with embedder(base, config) as (enrich, _):
            operator = AsyncWaitOperator(
                enrich, mode="unordered", capacity=CAPACITY, timeout=120,
                retry=default_retry_strategy(),
            )  # fmt: skip
            outputs = [o async for o in operator.run(iter(records))]
    done = [o for o in outputs if isinstance(o, Result | Failure)]
    assert len(done) == len(records) and all(isinstance(o, Result) for o in done)
    assert api.stats["inputs"] == len(records) and set(api.calls_by_prompt.values()) == {1}
    assert api.by_status[429] > 0, "the limit refused some requests (else nothing is tested)"
