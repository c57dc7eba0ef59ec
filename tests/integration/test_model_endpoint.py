"""The model-endpoint enricher against the demo model endpoint on loopback (no Spark):
every output class, pacing learned from the provider's headers (and configured limits
kept when the headers are nonsense), the cost budget, and the cross-run cache keyed by
model, parameters and rendered prompt."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import Any

import pyarrow as pa
import pytest

from demo.model_api import ModelApi, run_model_api
from demo.model_limits import ModelLimits
from spark_jobs.enrichers import HttpEnricher, HttpEnricherConfig, RequestBudget, ThrottledError
from spark_jobs.enrichers.model_endpoint import (
    ModelAnswers,
    ModelConfig,
    ModelPacing,
    request_options,
)
from spark_jobs.enrichers.model_endpoint.pacing import LIMIT_SHARE
from spark_jobs.partition_runner.cache_scope import scope_of
from spark_jobs.partition_runner.response_cache import ResponseCache

SCHEMA = {
    "type": "object",
    "properties": {
        "label": {"type": "string", "enum": ["spam", "ham"]},
        "score": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["label", "score", "tags"],
}


@asynccontextmanager
async def model_enricher(
    base_url: str,
    config: ModelConfig,
    path: str = "/chat/completions",
    *,
    stored: Any = None,
    cost_budget: RequestBudget | None = None,
    partitions: int = 1,
):
    options: dict[str, Any] = {
        "url_template": base_url + path,
        "response_fields": {"unused": "$.unused"},
        "partitions": partitions,
        "cache_size": 0,
    }
    options.update(request_options(config, options))
    http = HttpEnricherConfig.from_dict(options)
    pacing = ModelPacing(config, partitions, cost_budget)
    async with HttpEnricher(http, stored, answers=ModelAnswers(config), pacing=pacing) as enrich:
        yield enrich, pacing


async def outcome(enrich, record: dict) -> Any:
    """The record's output or the class name of its failure; throttled calls retried
    after their Retry-After, as the operator's retry strategy does."""
    while True:
        try:
            return await enrich(record)
        except ThrottledError as error:
            await asyncio.sleep(error.retry_after or 0.05)
        except Exception as error:
            return type(error).__name__


async def test_every_output_class_from_a_real_endpoint():
    api = ModelApi(malformed_every=4)
    async with run_model_api(api) as base:
        config = ModelConfig(model="demo", prompt="Is this spam? {title}", output_schema=SCHEMA)
        async with model_enricher(base, config) as (enrich, pacing):
            titles = [f"mail {i}" for i in range(40)] + ["REFUSE this", "FILTER this"]
            results = {t: await outcome(enrich, {"title": t}) for t in titles}
        chat_prompt_tokens = api.stats["prompt_tokens"]
        embed_config = ModelConfig(model="e", prompt="{title}", api="embeddings")
        async with model_enricher(base, embed_config, "/embeddings") as (embed, _):
            vector = await embed({"title": "hello"})
        claude = ModelConfig(
            model="c", prompt="Say {title}", api="anthropic", parameters={"max_tokens": 20}
        )
        async with model_enricher(base, claude, "/messages") as (anthropic, _):
            said = await anthropic({"title": "hi"})
            refused = await outcome(anthropic, {"title": "REFUSE"})
    assert results["REFUSE this"] == "RefusedError"
    assert results["FILTER this"] == "ContentFilteredError"
    structured = [r for r in results.values() if isinstance(r, dict)]
    invalid = [r for r in results.values() if r == "InvalidOutputError"]
    assert len(invalid) == api.stats["malformed"] > 0, "every malformed answer, and only those"
    assert len(structured) + len(invalid) == 40
    table = pa.Table.from_pylist(structured, schema=pa.schema(list(config.output_types().items())))
    assert table.column("tags").type == pa.list_(pa.string())
    assert all(r["label"] in ("spam", "ham") and r["completion_tokens"] > 0 for r in structured)
    assert pacing.counters["prompt_tokens"] == chat_prompt_tokens, "the ledger counts usage"
    assert len(vector["embedding"]) == 8 and all(isinstance(x, float) for x in vector["embedding"])
    assert said["answer"].startswith("The answer to prompt") and said["prompt_tokens"] > 0
    assert refused == "RefusedError"


@pytest.mark.parametrize("nonsense", [False, True])
async def test_pacing_follows_the_headers_and_ignores_nonsense(nonsense):
    """A token limit per 2 s window, stated in the headers (or sent as -1 by a broken
    gateway, and no Retry-After): the learned limit, or the configured one, paces."""
    limits = ModelLimits(requests=1000, tokens=1200, window_s=2.0, nonsense=nonsense)
    api = ModelApi(limits)
    async with run_model_api(api) as base:
        configured = 1000 if nonsense else None  # per "minute" of 2 s, under the real 1200
        config = ModelConfig(
            model="m",
            prompt="Classify {title}",
            tokens_per_minute=configured,
            limits_window_s=2.0,
            parameters={"max_tokens": 40},
        )
        async with model_enricher(base, config) as (enrich, pacing):
            results = await asyncio.gather(
                *(outcome(enrich, {"title": f"record {i}"}) for i in range(150))
            )
    assert all(isinstance(r, dict) for r in results), results
    expected = (1000 if nonsense else 1200) * LIMIT_SHARE / 2.0
    assert pacing.limits["tokens"].rate == pytest.approx(expected)
    assert api.stats["throttled"] <= 0.1 * api.stats["requests"], dict(api.stats)


async def test_a_fixed_window_is_recognised_and_spent_from_its_start_without_429s():
    """The demo endpoint's window is a fixed one: once its answers' resets have told it
    from a bucket, each window's tokens go out at its start (a bucket would pace them
    over the whole window), filling it, and no call is refused."""
    window_s = 1.0
    api = ModelApi(ModelLimits(requests=1000, tokens=600, window_s=window_s), latency_s=0.05)
    async with run_model_api(api) as base:
        # Charged at admission its prompt and max_tokens (OpenAI's rule), a call leaves
        # at most that much of a window unused when the endpoint counts less (the demo
        # counts the actual completion): 25 of 600 here.
        config = ModelConfig(
            model="m", prompt="Classify {title}", limits_window_s=window_s,
            parameters={"max_tokens": 20},
        )  # fmt: skip
        capacity = asyncio.Semaphore(8)  # the operator's: calls in flight

        async def one(record: dict) -> Any:
            async with capacity:
                return await outcome(enrich, record)

        async with model_enricher(base, config) as (enrich, pacing):
            results = await asyncio.gather(*(one({"title": f"record {i}"}) for i in range(300)))
    assert all(isinstance(r, dict) for r in results), results
    assert pacing.limits["tokens"].fixed_window
    assert api.stats["throttled"] == 0, dict(api.stats)
    tokens: dict[int, list[float]] = {}  # per window, the admitted calls' tokens by half
    for call in api.timeline:
        if call.admitted:
            halves = tokens.setdefault(int(call.at // window_s), [0.0, 0.0])
            halves[int(call.at % window_s >= window_s / 2)] += call.tokens
    first_fixed = 2  # the first window tells the shape
    whole = range(first_fixed, max(tokens))  # the last window is partial
    assert len(whole) >= 3, tokens
    # Each window filled but for at most two calls (a call's 15-20 tokens: on a busy
    # machine the last one may settle after the window has turned), and 0.95 on average.
    for index in whole:
        early, late = tokens[index]
        assert early + late >= 0.9 * 600 and early >= 0.9 * (early + late), (index, tokens)
    assert sum(sum(tokens[index]) for index in whole) >= 0.95 * 600 * len(whole), tokens


async def test_the_cost_budget_stops_calls_before_they_are_sent():
    api = ModelApi()
    async with run_model_api(api) as base:
        config = ModelConfig(
            model="m",
            prompt="Classify {title}",
            price_input_per_million=1000.0,
            price_output_per_million=1000.0,
            parameters={"max_tokens": 30},
        )
        budget = RequestBudget(allowance=1000 * 60, what="cost")  # 0.06 at 1e-3 per token
        async with model_enricher(base, config, cost_budget=budget) as (enrich, pacing):
            results = [await outcome(enrich, {"title": f"r{i}"}) for i in range(40)]
    stopped = [r for r in results if r == "BudgetExhausted"]
    paid = [r for r in results if isinstance(r, dict)]
    assert stopped and paid and len(paid) + len(stopped) == 40
    assert api.stats["requests"] == len(paid), "no call was sent after the budget was spent"
    spent = config.cost(pacing.prompt_tokens, pacing.completion_tokens)
    assert spent <= 0.06


async def test_the_cache_pays_once_per_prompt_and_again_for_a_changed_prompt(tmp_path):
    api = ModelApi()

    def cache() -> ResponseCache:
        stored = ResponseCache(
            str(tmp_path), partition=0, partitions=1, ttl_s=3600, scope=scope_of(b"k" * 32, {}, [])
        )
        stored.load()
        return stored

    async with run_model_api(api) as base:
        records = [{"title": f"t{i}"} for i in range(10)]
        first = ModelConfig(model="m", prompt="Classify {title}", parameters={"seed": 1})
        for config, expected_calls in (
            (first, 10),  # day 1: every prompt paid
            (first, 10),  # day 2: the same prompts, nothing paid
            (ModelConfig(model="m", prompt="Label {title}", parameters={"seed": 1}), 20),
            (ModelConfig(model="m", prompt="Label {title}", parameters={"seed": 2}), 30),
        ):
            stored = cache()
            async with model_enricher(base, config, stored=stored) as (enrich, _):
                for record in records:
                    assert isinstance(await enrich(record), dict)
            stored.flush()
            assert api.stats["requests"] == expected_calls
