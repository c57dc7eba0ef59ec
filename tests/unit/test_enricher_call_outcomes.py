"""The last minute's answers by outcome (``enrichers/call_outcomes.py``): the window slides,
its size is bounded whatever a server answers, and a hostile code never names an outcome."""

from __future__ import annotations

import json

from spark_jobs.enrichers.account_errors import provider_error
from spark_jobs.enrichers.call_outcomes import (
    BUCKET_S,
    MAX_OUTCOMES,
    OTHER,
    WINDOW_S,
    CallOutcomes,
    outcome_name,
)

THROTTLED = "429 rate_limit_exceeded"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_the_window_holds_the_last_minute_and_slides_bucket_by_bucket() -> None:
    clock = Clock()
    outcomes = CallOutcomes(clock)
    for _ in range(3):
        outcomes.add(THROTTLED)
    clock.now += BUCKET_S
    outcomes.add("200")
    assert outcomes.counts() == {THROTTLED: 3, "200": 1}
    clock.now += WINDOW_S - BUCKET_S  # the first bucket has passed, the second not yet
    assert outcomes.counts() == {"200": 1}
    clock.now += BUCKET_S
    assert outcomes.counts() == {}


def test_a_long_silence_empties_the_window_in_a_few_steps() -> None:
    clock = Clock()
    outcomes = CallOutcomes(clock)
    outcomes.add("503")
    clock.now += 1e9  # a bucket a step, not a step per bucket passed
    outcomes.add("200")
    assert outcomes.counts() == {"200": 1}


def test_a_server_answering_a_new_code_each_time_names_a_few_and_counts_the_rest() -> None:
    outcomes = CallOutcomes(Clock())
    for n in range(10_000):
        outcomes.add(f"400 code_{n}")
    counts = outcomes.counts()
    assert len(counts) == MAX_OUTCOMES + 1 and counts[OTHER] == 10_000 - MAX_OUTCOMES
    assert sum(counts.values()) == 10_000


def _body(error: object) -> bytes:
    return json.dumps({"error": error}).encode()


def test_an_outcome_is_the_status_and_the_providers_code_as_the_one_parser_reads_it() -> None:
    openai = _body({"message": "Rate limit reached", "type": "requests", "code": THROTTLED[4:]})
    anthropic = _body({"type": "overloaded_error", "message": "Overloaded"})
    assert outcome_name(429, provider_error(openai)) == THROTTLED
    assert outcome_name(529, provider_error(anthropic)) == "529 overloaded_error"
    assert outcome_name(503, provider_error(b"<html>busy</html>")) == "503"
    assert outcome_name(200) == "200"


def test_a_hostile_code_never_becomes_an_outcome_name() -> None:
    for code in ("x" * 65, "429 rate limit\n", "sk-secret token", "\u202eevil", 42, ["a"]):
        error = provider_error(_body({"code": code, "message": "m"}))
        assert outcome_name(429, error) == "429", code
    assert len(outcome_name(429, provider_error(_body({"code": "a" * 64})))) == 68
