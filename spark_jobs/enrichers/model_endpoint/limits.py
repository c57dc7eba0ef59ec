"""What a model provider's headers say about its request and token limits.

* OpenAI: ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``, resets as Go
  durations (``6m0s``, ``20ms``); the limits are per minute;
* Anthropic: ``anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}`` (also
  ``input-tokens``/``output-tokens``), resets as RFC 3339 times; per minute too;
* the IETF draft's ``RateLimit``/``RateLimit-Policy`` carry a request quota: the HTTP
  sender reads those (``rate_headers.py``) for every API already.

Values are hostile input, as in ``rate_headers.py``: anything unparsable, negative (a
gateway's ``-1``), zero for a limit, NaN or infinite counts as absent, so the configured
limits stay in force; a reset is capped at ``MAX_RESET_S``.
"""

from __future__ import annotations

import datetime
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass

from ..rate_headers import MAX_RESET_S, QuotaHint, parse_duration, parse_number


@dataclass(frozen=True, slots=True)
class ProviderLimits:
    """Limits per the provider's window (a minute), what is left and when it resets."""

    requests_limit: float | None = None
    tokens_limit: float | None = None
    tokens_remaining: float | None = None
    tokens_reset_s: float | None = None
    requests: QuotaHint | None = None
    """Anthropic's request quota, for the request-rate controller (OpenAI's it reads)."""


def _positive(value: str | None) -> float | None:
    number = parse_number(value)
    return number if number else None


def parse_reset_time(value: str | None, now: float | None = None) -> float | None:
    """Seconds until an RFC 3339 time (``2026-01-01T00:00:30Z``), capped; None if not one."""
    if not value:
        return None
    try:
        when = datetime.datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    seconds = when.timestamp() - (time.time() if now is None else now)
    return min(max(seconds, 0.0), MAX_RESET_S) if math.isfinite(seconds) else None


def provider_limits(headers: Mapping[str, str], now: float | None = None) -> ProviderLimits | None:
    """The limits ``headers`` state (case-insensitive lookup), None when they state none."""
    if "x-ratelimit-limit-tokens" in headers or "x-ratelimit-remaining-tokens" in headers:
        return ProviderLimits(
            requests_limit=_positive(headers.get("x-ratelimit-limit-requests")),
            tokens_limit=_positive(headers.get("x-ratelimit-limit-tokens")),
            tokens_remaining=parse_number(headers.get("x-ratelimit-remaining-tokens")),
            tokens_reset_s=parse_duration(headers.get("x-ratelimit-reset-tokens")),
        )
    if "x-ratelimit-limit-requests" in headers:
        return ProviderLimits(requests_limit=_positive(headers.get("x-ratelimit-limit-requests")))
    prefix = "anthropic-ratelimit-"
    kind = next((k for k in ("tokens", "input-tokens") if f"{prefix}{k}-limit" in headers), None)
    if kind is None and f"{prefix}requests-limit" not in headers:
        return None
    requests = QuotaHint(
        remaining=parse_number(headers.get(f"{prefix}requests-remaining")),
        reset_s=parse_reset_time(headers.get(f"{prefix}requests-reset"), now),
    )
    tokens = f"{prefix}{kind or 'tokens'}"
    return ProviderLimits(
        requests_limit=_positive(headers.get(f"{prefix}requests-limit")),
        tokens_limit=_positive(headers.get(f"{tokens}-limit")),
        tokens_remaining=parse_number(headers.get(f"{tokens}-remaining")),
        tokens_reset_s=parse_reset_time(headers.get(f"{tokens}-reset"), now),
        requests=requests if requests.remaining is not None else None,
    )
