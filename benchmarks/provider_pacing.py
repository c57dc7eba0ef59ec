"""The model-endpoint pacing against each provider's emulator: the share of the binding
limit used after the first minute, the share of calls answered 429, and dead letters.

Run with ``make bench-providers`` (``python -m benchmarks.provider_pacing [PROFILE ...]``).
Each profile of the demo endpoint (``demo/provider_profiles.py``: OpenAI's buckets charged
prompt plus ``max_tokens`` at admission, Azure's per-deployment limits, a gateway's fixed
windows, Anthropic's input and output tokens apart with the output settled at the
answer's end) serves
``PARTITIONS`` enrichers of ``CAPACITY`` calls in flight each, as the job's partitions
would (the HTTP enricher, the async wait operator and its default retry strategy; no
Spark, so that what is measured is the pacing). Nothing is configured: the limits are
learned from the headers. A "minute" lasts ``MINUTE_S`` seconds (the limits scaled down
tenfold with it), answers take ``LATENCY_S``. The token limit binds in every profile
(for Anthropic: the output tokens). Anthropic states its remaining tokens rounded to the
nearest thousand; at these scaled-down limits (1 200 output tokens a "minute") that would
state nothing but 0 and 1 000, so the emulator states them exact here (the pacing takes a
whole thousand as its lower bound, tested in ``tests/unit/test_model_endpoint.py``).
Results go to ``benchmarks/results/provider_pacing.json``.

The issue's targets: at least 0.9 of the binding limit after the first minute, at most
2 % of calls answered 429, no dead letter.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from demo.model_api import ModelApi, run_model_api
from demo.model_limits import ModelLimits
from demo.provider_profiles import (
    AnthropicProfile,
    AzureProfile,
    FixedWindowProfile,
    OpenAIProfile,
    ProviderProfile,
)
from spark_jobs.asyncwait import AsyncWaitOperator, Failure
from spark_jobs.enrichers import HttpEnricher, HttpEnricherConfig, default_retry_strategy
from spark_jobs.enrichers.model_endpoint import (
    ModelAnswers,
    ModelConfig,
    ModelPacing,
    request_options,
)

RESULTS = Path(__file__).parent / "results" / "provider_pacing.json"
MINUTE_S = 6.0
LATENCY_S = 0.3
PARTITIONS = 2
CAPACITY = 8
RECORDS = 1200
MAX_TOKENS = 40
SCHEMA = {
    "type": "object",
    "properties": {"label": {"type": "string", "enum": ["spam", "ham", "other"]}},
    "required": ["label"],
}

PROFILES: dict[str, tuple[str, Callable[[], ProviderProfile]]] = {
    # name: (the binding limit, the profile); a few calls' worth of headroom elsewhere
    "openai": ("tokens", lambda: OpenAIProfile(requests=300, tokens=6000, minute_s=MINUTE_S)),
    "azure": ("tokens", lambda: AzureProfile(requests=300, tokens=6000, minute_s=MINUTE_S)),
    "fixed-window": (  # a gateway's (the demo default): counts the actual completion
        "tokens",
        lambda: FixedWindowProfile(ModelLimits(requests=300, tokens=1500, window_s=MINUTE_S)),
    ),
    "anthropic": (
        "output_tokens",
        lambda: AnthropicProfile(
            requests=300,
            input_tokens=30_000,
            output_tokens=1200,
            minute_s=MINUTE_S,
            round_remaining=False,  # see the module docstring
        ),
    ),
}


def model_config(profile: str) -> ModelConfig:
    api = "anthropic" if profile == "anthropic" else "chat"
    return ModelConfig(
        model="m",
        prompt="Classify this message: {title}",
        api=api,
        provider=None if profile == "fixed-window" else profile,  # type: ignore[arg-type]
        output_schema=None if api == "anthropic" else SCHEMA,
        limits_window_s=MINUTE_S,
        parameters={"max_tokens": MAX_TOKENS},
    )


async def partition(base: str, config: ModelConfig, records: range) -> list[Any]:
    """One partition's enricher and operator over ``records``, as the job runs them."""
    path = "/messages" if config.api == "anthropic" else "/chat/completions"
    options: dict[str, Any] = {
        "url_template": base + path,
        "response_fields": {"unused": "$.unused"},
        "partitions": PARTITIONS,
        "capacity": CAPACITY,
        "cache_size": 0,
    }
    options.update(request_options(config, options))
    pacing = ModelPacing(config, PARTITIONS)
    http = HttpEnricherConfig.from_dict(options)
    async with HttpEnricher(http, answers=ModelAnswers(config), pacing=pacing) as enrich:
        operator = AsyncWaitOperator(
            enrich, mode="unordered", capacity=CAPACITY, timeout=600,
            retry=default_retry_strategy(),
        )  # fmt: skip
        return [o async for o in operator.run({"title": f"record {i}"} for i in records)][:-1]


def limit_use(api: ModelApi, limit: str) -> dict[str, Any]:
    """From the endpoint's log: the binding limit's share used per whole minute after the
    first, and the 429 share."""
    calls = api.timeline
    capacity = api.profile.limits()[limit] if api.profile is not None else 0
    per_minute: dict[int, int] = {}
    for call in calls:
        if call.admitted:
            minute = int(call.at // MINUTE_S)
            per_minute[minute] = per_minute.get(minute, 0) + call.charged.get(limit, 0)
    last = int(calls[-1].at // MINUTE_S)  # partial
    whole = [per_minute.get(m, 0) / capacity for m in range(1, last)]
    throttled = sum(1 for call in calls if call.status == 429)
    return {
        "limit": limit,
        "per_minute": capacity,
        "used_per_minute": [round(u, 3) for u in whole],
        "used_after_first_minute": round(sum(whole) / len(whole), 3) if whole else None,
        "calls": len(calls),
        "answered_429": throttled,
        "share_429": round(throttled / len(calls), 4),
    }


async def run_profile(name: str, records: int = RECORDS) -> dict[str, Any]:
    limit, make = PROFILES[name]
    api = ModelApi(profile=make(), latency_s=LATENCY_S)
    config = model_config(name)
    started = time.monotonic()
    async with run_model_api(api) as base:
        shares = [range(p, records, PARTITIONS) for p in range(PARTITIONS)]
        outputs = await asyncio.gather(*(partition(base, config, s) for s in shares))
    failed = [o for part in outputs for o in part if isinstance(o, Failure)]
    return {
        "profile": name,
        **limit_use(api, limit),
        "records": records,
        "dead_letters": len(failed),
        "dead_letter_errors": sorted({f.error[:120] for f in failed})[:5],
        "wall_s": round(time.monotonic() - started, 1),
    }


def main(argv: list[str]) -> None:
    names = argv or list(PROFILES)
    unknown = sorted(set(names) - set(PROFILES))
    if unknown:
        raise SystemExit(f"unknown profile(s) {unknown}; choose from {sorted(PROFILES)}")
    results = []
    for name in names:
        result = asyncio.run(run_profile(name))
        print(json.dumps(result), flush=True)
        results.append(result)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"minute_s": MINUTE_S, "runs": results}, indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
