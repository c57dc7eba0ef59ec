"""The demo API's hard rate limit and 503 knob, seen over real HTTP on loopback."""

from __future__ import annotations

import asyncio
from collections import Counter

import aiohttp
import pytest
from multidict import CIMultiDict

from demo.api import run_demo_api
from demo.api_options import parser
from demo.faults import DemoConfig
from demo.rate_limit import RateLimit, WindowCounter
from spark_jobs.enrichers.rate_headers import quota_hint


class StoppedClock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def test_the_window_admits_the_rate_per_second_then_refuses_until_the_next():
    clock = StoppedClock()
    counter = WindowCounter(RateLimit(3), clock)
    assert [counter.admit()[0] for _ in range(5)] == [True, True, True, False, False]
    assert counter.admit()[1] == {"Retry-After": "1"}
    clock.now += 1.0
    assert counter.admit()[0]


@pytest.mark.parametrize("style", ["openai", "ietf"])
def test_announced_headers_read_back_as_the_quota_left(style):
    clock = StoppedClock()
    counter = WindowCounter(RateLimit(2, style), clock)
    clock.now += 0.75
    first = quota_hint(CIMultiDict(counter.admit()[1]))
    second = quota_hint(CIMultiDict(counter.admit()[1]))
    assert first.remaining == 1 and not first.exhausted
    assert second.remaining == 0 and second.exhausted and 0 < second.reset_s <= 1
    if style == "ietf":
        assert second.policy_rate == 2


@pytest.mark.parametrize("rate", [0, -1, float("nan"), float("inf"), True])
def test_a_bad_rate_limit_is_refused_naming_the_option(rate):
    with pytest.raises(ValueError, match="--rate-limit"):
        RateLimit(rate)


def test_the_options_are_in_help_with_their_defaults():
    text = " ".join(parser().format_help().split())
    assert "--rate-limit R" in text and "--rate-limit-headers" in text
    assert "default: none" in text and "--unavailable-rate" in text


async def test_requests_beyond_the_limit_get_429_with_retry_after_and_are_counted():
    async with run_demo_api(DemoConfig(), rate_limit=RateLimit(20, "ietf")) as url:
        async with aiohttp.ClientSession(url) as session:

            async def get(i: int) -> tuple[int, str | None, str | None]:
                async with session.get(f"/customers/c{i}") as response:
                    await response.read()
                    return (
                        response.status,
                        response.headers.get("Retry-After"),
                        (response.headers.get("RateLimit")),
                    )

            answers = await asyncio.gather(*(get(i) for i in range(60)))
            async with session.get("/stats") as response:
                stats = await response.json()
    statuses = Counter(status for status, _, _ in answers)
    # 60 requests within at most two windows (a window may turn while they arrive).
    assert 20 <= statuses[200] <= 40 and statuses[429] == 60 - statuses[200]
    assert all(after == "1" for status, after, _ in answers if status == 429)
    assert all(field and ";r=" in field for _, _, field in answers)
    assert stats["by_status"] == {str(s): n for s, n in statuses.items()}
    per_second = stats["per_second"]
    assert sum(second.get("429", 0) for second in per_second.values()) == statuses[429]


async def test_unavailable_rate_answers_503_without_retry_after():
    async with run_demo_api(DemoConfig(unavailable_rate=1.0)) as url:
        async with aiohttp.ClientSession(url) as session:
            async with session.get("/customers/c1") as response:
                await response.read()
                assert response.status == 503
                assert "Retry-After" not in response.headers
