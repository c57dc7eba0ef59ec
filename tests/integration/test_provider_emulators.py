"""The demo model endpoint's provider profiles on loopback, each behaving as its provider
documents: continuously refilled buckets (capacity, refill rate, reset = time to full),
the charge at admission (prompt plus ``max_tokens``), 429 bodies and headers, account
states, fault shares, Azure's per-deployment windows, Anthropic's output adjustment, and
the self-hosted server's batch and queue. Time is an injected clock wherever the limits
decide, so the assertions are exact; the self-hosted server runs on real time."""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Mapping
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from demo.batch_scheduler import BatchServing
from demo.model_api import ModelApi, count_tokens, run_model_api
from demo.provider_profiles import (
    DEFAULT_MAX_TOKENS,
    AnthropicProfile,
    AzureProfile,
    Faults,
    OpenAIProfile,
    ProviderProfile,
    SelfHostedProfile,
    go_duration,
)

PROMPT = "Classify this message: hello"
PROMPT_TOKENS = count_tokens(PROMPT)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@asynccontextmanager
async def serving(profile: ProviderProfile, **api: Any):
    """The endpoint with ``profile`` on loopback; yields (post(path, body), the state)."""
    state = ModelApi(profile=profile, **api)
    async with run_model_api(state) as base, aiohttp.ClientSession() as session:
        root = base.removesuffix("/v1")

        async def post(path: str, body: Mapping[str, Any]) -> tuple[int, Any, Mapping[str, str]]:
            async with session.post(root + path, json=body) as answer:
                return answer.status, await answer.json(), answer.headers

        yield post, state


def chat(max_tokens: int | None = 20, model: str = "gpt-demo") -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": PROMPT}]}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body


PATHS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}


def bucket_profile(name: str, clock: _Clock, **limits: int) -> ProviderProfile:
    if name == "openai":
        return OpenAIProfile(minute_s=6.0, clock=clock, **limits)
    return AnthropicProfile(minute_s=6.0, clock=clock, round_remaining=False, **limits)


@pytest.mark.parametrize("name", ["openai", "anthropic"])
async def test_a_bucket_holds_its_per_minute_limit_and_refills_at_a_sixtieth_a_second(name):
    clock = _Clock()
    async with serving(bucket_profile(name, clock, requests=10)) as (post, api):
        statuses = [(await post(PATHS[name], chat()))[0] for _ in range(11)]
        assert statuses == [200] * 10 + [429], "full at the start: the whole limit at once"
        clock.now += 3 * 6.0 / 10 + 1e-9  # three requests' worth of refill (and float's ulp)
        statuses = [(await post(PATHS[name], chat()))[0] for _ in range(4)]
        assert statuses == [200, 200, 200, 429]
        clock.now += 600  # ten minutes idle: full, never more
        statuses = [(await post(PATHS[name], chat()))[0] for _ in range(11)]
        assert statuses == [200] * 10 + [429]
    assert api.stats["throttled"] == 3 and api.stats["admitted"] == 23


async def test_openai_charges_the_prompt_and_max_tokens_at_admission_never_refunded():
    clock = _Clock()
    profile = OpenAIProfile(requests=100, tokens=6000, minute_s=60.0, clock=clock)
    async with serving(profile) as (post, api):
        status, answer, headers = await post("/v1/chat/completions", chat(max_tokens=300))
        assert status == 200
        used = answer["usage"]["completion_tokens"]
        assert used < 300
        charge = PROMPT_TOKENS + 300  # not prompt + the answer's own tokens
        assert headers["x-ratelimit-limit-tokens"] == "6000"
        assert headers["x-ratelimit-remaining-tokens"] == str(6000 - charge)
        assert headers["x-ratelimit-reset-tokens"] == go_duration(charge / 100)  # to full
        assert headers["x-ratelimit-limit-requests"] == "100"
        assert headers["x-ratelimit-reset-requests"] == "600ms"  # one request of 100/min
        _, _, headers = await post("/v1/chat/completions", chat(max_tokens=None))
        assert headers["x-ratelimit-remaining-tokens"] == str(
            6000 - charge - PROMPT_TOKENS - DEFAULT_MAX_TOKENS
        ), "no max_tokens: the documented default is charged"
    assert api.stats["charged_tokens"] == 2 * PROMPT_TOKENS + 300 + DEFAULT_MAX_TOKENS
    assert [call.charged["tokens"] for call in api.timeline] == [
        charge, PROMPT_TOKENS + DEFAULT_MAX_TOKENS
    ]  # fmt: skip


@pytest.mark.parametrize("retry_after", [False, True])
async def test_openai_refuses_with_the_time_the_request_fits_and_no_retry_after(retry_after):
    clock = _Clock()
    profile = OpenAIProfile(
        requests=1000, tokens=1000, minute_s=60.0, retry_after=retry_after, clock=clock
    )
    async with serving(profile) as (post, _):
        request = PROMPT_TOKENS + 400
        assert (await post("/v1/chat/completions", chat(max_tokens=400)))[0] == 200
        assert (await post("/v1/chat/completions", chat(max_tokens=400)))[0] == 200
        status, body, headers = await post("/v1/chat/completions", chat(max_tokens=400))
    assert status == 429
    error = body["error"]
    assert error["type"] == "tokens" and error["code"] == "rate_limit_exceeded"
    assert error["param"] is None
    left = 1000 - 2 * request
    wait = (request - left) / (1000 / 60)
    assert (
        f"Rate limit reached for gpt-demo in organization org-demo on tokens per min (TPM): "
        f"Limit 1000, Used {1000 - left}, Requested {request}. "
        f"Please try again in {go_duration(wait)}." in error["message"]
    )
    assert ("Retry-After" in headers) is retry_after
    if retry_after:
        assert headers["Retry-After"] == str(math.ceil(wait))
    assert headers["x-ratelimit-reset-tokens"] == go_duration(2 * request / (1000 / 60))


async def test_openai_names_the_request_limit_when_it_is_the_one_reached():
    profile = OpenAIProfile(requests=1, tokens=100_000, minute_s=60.0, clock=_Clock())
    async with serving(profile) as (post, _):
        await post("/v1/chat/completions", chat())
        status, body, _ = await post("/v1/chat/completions", chat())
    assert status == 429 and body["error"]["type"] == "requests"
    assert "on requests per min (RPM): Limit 1, Used 1, Requested 1" in body["error"]["message"]
    assert "Please try again in 1m0s." in body["error"]["message"]


ACCOUNT_ANSWERS = [
    ("openai", "spent", 429, "insufficient_quota", "You exceeded your current quota"),
    ("openai", "invalid-key", 401, "invalid_api_key", "Incorrect API key provided"),
    ("openai", "unknown-model", 404, "model_not_found", "The model `gpt-demo` does not exist"),
    ("azure", "spent", 429, "insufficient_quota", "You exceeded your current quota"),
    ("anthropic", "spent", 402, "billing_error", "Your credit balance is too low"),
    ("anthropic", "invalid-key", 401, "authentication_error", "invalid x-api-key"),
    ("anthropic", "no-permission", 403, "permission_error", "does not have permission"),
    ("anthropic", "unknown-model", 404, "not_found_error", "model: gpt-demo"),
]


@pytest.mark.parametrize("name, account, status, code, text", ACCOUNT_ANSWERS)
async def test_an_account_state_fails_every_call_as_its_provider_does(
    name, account, status, code, text
):
    profile: ProviderProfile
    if name == "openai":
        profile = OpenAIProfile(requests=1000, account=account)
    elif name == "azure":
        profile = AzureProfile(tokens=100_000, account=account)
    else:
        profile = AnthropicProfile(requests=1000, account=account)
    path = PATHS.get(name, "/openai/deployments/d1/chat/completions?api-version=2024-10-21")
    async with serving(profile) as (post, api):
        answers = [await post(path, chat()) for _ in range(5)]
    assert {answer[0] for answer in answers} == {status}, "every call, not some"
    error = answers[0][1]["error"]
    assert (error.get("code") if name != "anthropic" else error["type"]) == code
    if name != "anthropic":
        assert error["type"] in (code, "invalid_request_error")
    else:
        assert answers[0][1]["type"] == "error" and answers[0][1]["request_id"]
    assert text in error["message"]
    assert api.stats["account"] == 5 and api.stats["admitted"] == 0
    assert not api.stats["charged_requests"], "a refused account is charged nothing"


@pytest.mark.parametrize(
    "name, status, kind", [("openai", 503, "server_error"), ("anthropic", 529, "overloaded_error")]
)
async def test_a_seeded_share_of_calls_is_overloaded_or_fails(name, status, kind):
    faults = Faults(server_errors=0.05, overloaded=0.15, seed=3)
    profile = bucket_profile(name, _Clock(), requests=10_000)
    profile.faults = faults  # type: ignore[union-attr]
    async with serving(profile) as (post, api):
        answers = [await post(PATHS[name], chat()) for _ in range(400)]
    overloaded = [body for code, body, _ in answers if code == status]
    assert 0.10 <= len(overloaded) / 400 <= 0.20, len(overloaded)
    assert 0.02 <= sum(1 for code, _, _ in answers if code == 500) / 400 <= 0.08
    error = overloaded[0]["error"]
    assert error["type"] == kind
    assert error["message"] == (
        "Overloaded" if name == "anthropic" else
        "The engine is currently overloaded, please try again later."
    )  # fmt: skip
    assert api.stats["overloaded"] == len(overloaded)
    assert api.stats["admitted"] == 400 - len(overloaded) - api.stats["server_error"]
    replay = Faults(server_errors=0.05, overloaded=0.15, seed=3)
    expected = [replay.draw() for _ in range(400)]
    assert [code == status for code, _, _ in answers] == [d == "overloaded" for d in expected]


async def test_anthropic_charges_max_tokens_and_gives_back_the_unused_when_the_answer_ends():
    """Output charged ``max_tokens`` at admission: a second call while the first is being
    answered does not fit; once the first has ended its unused output is back."""
    clock = _Clock()
    profile = AnthropicProfile(
        requests=100, input_tokens=10_000, output_tokens=1000, minute_s=60.0,
        round_remaining=False, clock=clock,
    )  # fmt: skip
    async with serving(profile, latency_s=0.3) as (post, api):
        first = asyncio.create_task(post("/v1/messages", chat(max_tokens=600)))
        await asyncio.sleep(0.1)  # admitted, not answered yet
        status, body, headers = await post("/v1/messages", chat(max_tokens=600))
        assert status == 429 and body["error"]["type"] == "rate_limit_error"
        assert "1000 output tokens per minute" in body["error"]["message"]
        assert headers["retry-after"] == str(math.ceil((600 - 400) / (1000 / 60)))
        assert headers["anthropic-ratelimit-output-tokens-remaining"] == "400"
        status, answer, headers = await first
        assert status == 200
        used = answer["usage"]["output_tokens"]
        assert headers["anthropic-ratelimit-output-tokens-remaining"] == str(1000 - used)
        assert headers["anthropic-ratelimit-input-tokens-remaining"] == str(10_000 - PROMPT_TOKENS)
        assert headers["anthropic-ratelimit-tokens-remaining"] == str(1000 - used)  # tightest
        reset = headers["anthropic-ratelimit-output-tokens-reset"]
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", reset), reset
        assert (await post("/v1/messages", chat(max_tokens=600)))[0] == 200
    answered = next(call for call in api.timeline if call.status == 200)
    assert answered.charged == {
        "requests": 1, "input_tokens": PROMPT_TOKENS, "output_tokens": used
    }  # fmt: skip
    assert api.stats["throttled"] == 1
    assert api.provider.stats()["output_tokens_given_back"] == 2 * (600 - used)


async def test_anthropic_rounds_token_remaining_to_thousands_and_needs_max_tokens():
    profile = AnthropicProfile(requests=100, input_tokens=40_000, output_tokens=8000)
    async with serving(profile) as (post, _):
        status, _, headers = await post("/v1/messages", chat(max_tokens=300))
        assert status == 200
        assert headers["anthropic-ratelimit-input-tokens-remaining"] == "40000"
        assert headers["anthropic-ratelimit-requests-remaining"] == "99", "requests exact"
        status, body, _ = await post("/v1/messages", chat(max_tokens=None))
    assert status == 400 and body["error"]["type"] == "invalid_request_error"


async def test_azure_limits_each_deployment_apart_with_retry_after_ms():
    """60 000 TPM: 360 RPM, evaluated per 10 s as 60; a deployment's 61st call in its
    window is refused, another deployment's is not."""
    clock = _Clock()
    profile = AzureProfile(tokens=60_000, minute_s=60.0, clock=clock)
    path = "/openai/deployments/{}/chat/completions?api-version=2024-10-21"
    async with serving(profile) as (post, api):
        for _ in range(60):
            status, _, headers = await post(path.format("east"), chat(max_tokens=50))
            assert status == 200
        assert headers["x-ratelimit-remaining-requests"] == "0"
        assert headers["x-ratelimit-remaining-tokens"] == str(60_000 - 60 * (PROMPT_TOKENS + 50))
        assert not [name for name in headers if name.startswith("x-ratelimit-limit")]
        clock.now += 2.5
        status, body, headers = await post(path.format("east"), chat(max_tokens=50))
        assert status == 429 and body["error"]["code"] == "429"
        assert "exceeded call rate limit" in body["error"]["message"]
        assert headers["retry-after-ms"] == "7500" and headers["retry-after"] == "8"
        assert "Please retry after 8 seconds" in body["error"]["message"]
        assert (await post(path.format("west"), chat(max_tokens=50)))[0] == 200
        assert (await post("/v1/chat/completions", chat(model="north")))[0] == 200, "v1: model"
        clock.now += 7.5
        assert (await post(path.format("east"), chat(max_tokens=50)))[0] == 200, "next window"
    assert set(profile.deployments) == {"east", "west", "north"}
    assert api.stats["throttled"] == 1


async def test_azure_counts_tokens_per_minute_from_max_tokens():
    clock = _Clock()
    profile = AzureProfile(tokens=6000, requests=600, minute_s=60.0, clock=clock)
    async with serving(profile) as (post, _):
        statuses = [(await post("/v1/chat/completions", chat(max_tokens=1000)))[0]
                    for _ in range(6)]  # fmt: skip
        clock.now += 20
        status, body, headers = await post("/v1/chat/completions", chat(max_tokens=1000))
    charge = PROMPT_TOKENS + 1000
    assert statuses == [200] * (6000 // charge) + [429] * (6 - 6000 // charge)
    assert status == 429 and "exceeded token rate limit" in body["error"]["message"]
    assert headers["retry-after-ms"] == "40000", "to the minute's end: a fixed count"


async def test_a_self_hosted_server_serves_its_batch_and_queues_the_rest():
    serving_shape = BatchServing(batch=4, base_s=0.05, step_s=0.004, slowdown=0.1)
    async with serving(SelfHostedProfile(serving_shape)) as (post, api):
        alone = await post("/v1/chat/completions", chat())
        answers = await asyncio.gather(*(post("/v1/chat/completions", chat()) for _ in range(24)))
    assert alone[0] == 200 and all(status == 200 for status, _, _ in answers)
    assert not [h for _, _, headers in answers for h in headers if "ratelimit" in h.lower()]
    scheduler = api.provider.stats()["self_hosted"]
    assert scheduler["max_in_service"] == 4, "never more than the batch at once"
    assert scheduler["max_waiting"] == 20 and api.stats.get("throttled", 0) == 0
    completion = alone[1]["usage"]["completion_tokens"]
    unloaded = serving_shape.latency_s(completion)
    assert scheduler["unloaded_latency_s"] == pytest.approx(unloaded, abs=0.001)
    # Against the server's own unloaded figure: the lone call's measured latency can
    # include a stall of a busy machine (0.47 s for a 0.17 s call, seen in CI).
    loaded = sorted(call.latency_s for call in api.timeline[1:])
    assert loaded[len(loaded) // 2] > 2.5 * unloaded, (unloaded, loaded)
    assert scheduler["best_requests_per_s"] == pytest.approx(
        4 / serving_shape.latency_s(completion, 4), rel=0.01
    )


async def test_a_self_hosted_server_with_a_bounded_queue_answers_503_beyond_it():
    serving_shape = BatchServing(batch=2, queue=3, base_s=0.2, step_s=0.0)
    async with serving(SelfHostedProfile(serving_shape)) as (post, api):
        answers = await asyncio.gather(*(post("/v1/chat/completions", chat()) for _ in range(9)))
    statuses = sorted(status for status, _, _ in answers)
    assert statuses == [200] * 5 + [503] * 4, "2 served, 3 queued, the rest refused"
    refused = next(body for status, body, _ in answers if status == 503)
    assert refused["error"]["type"] == "unavailable_error"
    assert api.stats["unavailable"] == 4 and api.by_status[503] == 4


async def test_content_parts_count_as_their_text_and_usage_carries_the_total():
    """Clients that send a message as content parts (Daft does) are charged its text, as
    providers count, and OpenAI's usage carries ``total_tokens`` (Curator reads it)."""
    parts = [{"type": "text", "text": PROMPT}]
    body = {"model": "m", "messages": [{"role": "user", "content": parts}], "max_tokens": 20}
    async with serving(OpenAIProfile()) as (post, _):
        status, answer, _ = await post("/v1/chat/completions", body)
    usage = answer["usage"]
    assert status == 200 and usage["prompt_tokens"] == PROMPT_TOKENS
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
