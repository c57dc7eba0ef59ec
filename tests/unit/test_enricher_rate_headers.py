"""Rate-limit headers: the three conventions, and hostile values that must neither crash
nor pause a partition for long."""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict

from spark_jobs.enrichers.rate_headers import (
    MAX_RESET_S,
    QuotaHint,
    parse_duration,
    quota_hint,
    retry_delay,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1", 1.0),
        ("2.5", 2.5),
        ("1s", 1.0),
        ("20ms", 0.02),
        ("6m0s", 60.0),
        ("1m30s", 60.0),
        ("1.5s", 1.5),
        ("0s", 0.0),
        ("999999", MAX_RESET_S),
        ("3h", MAX_RESET_S),
    ],
)
def test_reset_durations_in_seconds_or_go_form_capped(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text", ["", "s", "abc", "-1", "nan", "inf", "1e999", "1x", "1s2", "5 s", "1s;drop", None]
)
def test_garbage_durations_are_ignored(text):
    assert parse_duration(text) is None


def test_openai_style_headers():
    hint = quota_hint(
        CIMultiDict(
            {
                "x-ratelimit-limit-requests": "60",
                "x-ratelimit-remaining-requests": "0",
                "x-ratelimit-reset-requests": "6m0s",
                "x-ratelimit-remaining-tokens": "1000",
            }
        )
    )
    assert hint == QuotaHint(remaining=0, reset_s=MAX_RESET_S, limit=60)
    assert hint.exhausted and hint.policy_rate is None  # the period is not stated


def test_openai_spent_tokens_are_the_token_pacing_s_not_a_spent_request_quota():
    """Tokens are charged and paced per limit by a model endpoint's pacing: read twice,
    a spent token limit would pause every request and cut the request rate too."""
    hint = quota_hint(
        CIMultiDict(
            {
                "x-ratelimit-remaining-requests": "10",
                "x-ratelimit-reset-requests": "1s",
                "x-ratelimit-remaining-tokens": "0",
                "x-ratelimit-reset-tokens": "250ms",
            }
        )
    )
    assert not hint.exhausted and hint.reset_s == pytest.approx(1.0)


def test_ietf_triple_with_policy():
    hint = quota_hint(
        CIMultiDict(
            {
                "RateLimit-Limit": "100",
                "RateLimit-Remaining": "7",
                "RateLimit-Reset": "3",
                "RateLimit-Policy": "100;w=10",
            }
        )
    )
    assert hint == QuotaHint(remaining=7, reset_s=3, limit=100, window_s=10)
    assert not hint.exhausted and hint.policy_rate == 10


def test_ietf_structured_fields():
    hint = quota_hint(
        CIMultiDict(
            {
                "RateLimit": '"default";r=0;t=30',
                "RateLimit-Policy": '"default";q=50;w=5',
            }
        )
    )
    assert hint == QuotaHint(remaining=0, reset_s=30, limit=50, window_s=5)
    assert hint.exhausted and hint.policy_rate == 10


def test_no_rate_limit_fields_no_hint():
    assert quota_hint(CIMultiDict({"Content-Type": "application/json"})) is None


@pytest.mark.parametrize(
    "headers",
    [
        {"RateLimit-Remaining": "-5", "RateLimit-Reset": "NaN", "RateLimit-Limit": "inf"},
        {"RateLimit": "garbage;;;r=;t=-1", "RateLimit-Policy": ";w=0;q=x"},
        {"RateLimit": '"d";r=1e309;t=1e309', "RateLimit-Policy": '"d";q=0;w=0'},
        {"x-ratelimit-remaining-requests": "lots", "x-ratelimit-reset-requests": "soon"},
    ],
)
def test_hostile_values_read_as_unknown(headers):
    hint = quota_hint(CIMultiDict(headers))
    assert hint is not None and not hint.exhausted
    assert hint.policy_rate is None


@given(
    st.dictionaries(
        st.sampled_from(
            [
                "RateLimit",
                "RateLimit-Policy",
                "RateLimit-Remaining",
                "RateLimit-Reset",
                "RateLimit-Limit",
                "x-ratelimit-remaining-requests",
                "x-ratelimit-reset-requests",
                "x-ratelimit-remaining-tokens",
                "x-ratelimit-reset-tokens",
                "x-ratelimit-limit-requests",
            ]
        ),
        st.text(max_size=30),
    )
)
def test_any_header_text_gives_a_bounded_hint_or_none(headers):
    hint = quota_hint(CIMultiDict(headers))
    if hint is not None and hint.reset_s is not None:
        assert 0 <= hint.reset_s <= MAX_RESET_S
    if hint is not None and hint.policy_rate is not None:
        assert hint.policy_rate >= 0


@pytest.mark.parametrize(
    ("headers", "body", "seconds"),
    [
        ({"retry-after-ms": "1500", "Retry-After": "2"}, b"", 1.5),  # Azure: ms first
        ({"Retry-After": "2"}, b"Please try again in 287ms.", 2.0),
        ({}, b'{"error": {"message": "... Please try again in 287ms. Visit"}}', 0.287),
        ({}, b'{"error": {"message": "Please try again in 1.5s."}}', 1.5),
        ({}, b'{"error": {"code": "429", "message": "Please retry after 3 seconds."}}', 3.0),
        ({}, b"Please try again in 99999s", MAX_RESET_S),  # hostile: capped
        ({"retry-after-ms": "-5"}, b"", None),
        ({}, b"slow down", None),
    ],
)
def test_a_throttled_answer_s_wait_from_headers_or_the_provider_s_words(headers, body, seconds):
    assert retry_delay(CIMultiDict(headers), body) == (
        None if seconds is None else pytest.approx(seconds)
    )


def test_the_body_is_searched_only_near_its_start():
    assert retry_delay(CIMultiDict(), b"x" * 10_000 + b"try again in 1s") is None
