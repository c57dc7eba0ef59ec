"""What an answer's rate-limit headers say about the quota left, read defensively: the
one parser of every provider's headers, for requests (:func:`quota_hint`, the sender's
rate controller) and for tokens (:func:`token_quotas`, a model endpoint's pacing).

The conventions understood:

* OpenAI (and Azure OpenAI) style: ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``,
  the reset in seconds or as a Go duration (``1s``, ``20ms``, ``6m0s``); Azure sends the
  remaining counts alone;
* Anthropic: ``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,
  remaining,reset}``, the reset an RFC 3339 time;
* the IETF draft's older fields ``RateLimit-Limit``, ``RateLimit-Remaining`` and
  ``RateLimit-Reset`` (seconds), with ``RateLimit-Policy: 100;w=60``;
* its structured form ``RateLimit: "default";r=50;t=30`` with
  ``RateLimit-Policy: "default";q=100;w=60``.

Header values come from the server and are hostile input: anything unparsable, negative,
NaN or infinite is ignored (as if absent), and a reset is capped at ``MAX_RESET_S`` so a
silly value can pause a partition for a while, never forever.
"""

from __future__ import annotations

import datetime
import email.utils
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass

#: Longest pause a reset header can cause (a server's "try in a day" is not obeyed).
MAX_RESET_S = 60.0

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_PARAMETER = re.compile(r";\s*([a-z]+)\s*=\s*([^;,\s]+)")


@dataclass(frozen=True, slots=True)
class QuotaHint:
    """The quota an answer reports: ``remaining`` calls until ``reset_s`` from now, and
    the policy's ``limit`` per ``window_s`` when stated (any field may be unknown)."""

    remaining: float | None = None
    reset_s: float | None = None
    limit: float | None = None
    window_s: float | None = None

    @property
    def exhausted(self) -> bool:
        """The quota is spent and the server said when it comes back."""
        return self.remaining is not None and self.remaining < 1 and self.reset_s is not None

    @property
    def limits(self) -> bool:
        """A throttled answer carrying this is a rate limit, not an isolated refusal: its
        quota is spent (said when it comes back or not: a 429 stating no request left is
        believed, as Azure's, whose headers state no reset), or it states a policy."""
        spent = self.remaining is not None and self.remaining < 1
        return spent or self.policy_rate is not None

    @property
    def policy_rate(self) -> float | None:
        """The policy's requests per second, when both its quota and its window are known."""
        if self.limit is None or not self.window_s:
            return None
        return self.limit / self.window_s


@dataclass(frozen=True, slots=True)
class TokenQuota:
    """A token limit an answer states: ``limit`` per the provider's window, ``remaining``
    of it and the seconds until it is full again (``reset_s``); any may be unknown."""

    limit: float | None = None
    remaining: float | None = None
    reset_s: float | None = None
    rounded: bool = False
    """``remaining`` is the lower bound of a count the provider rounded."""


ANTHROPIC_ROUNDING = 1000
"""Anthropic states its remaining tokens "rounded to the nearest thousand" (its rate-limit
headers' documentation): a stated 3 000 is taken as 2 500, what it may be."""

TOKEN_KINDS = ("tokens", "input_tokens", "output_tokens")
"""The token limits a provider may state: all tokens (OpenAI), or input and output apart
(Anthropic, which may state ``tokens`` too)."""


def parse_number(value: str | None) -> float | None:
    """A finite, non-negative number, or None for anything else."""
    if value is None:
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


def parse_duration(value: str | None) -> float | None:
    """Seconds from ``"2.5"``, ``"1s"``, ``"20ms"`` or ``"6m0s"``, capped at MAX_RESET_S;
    None for anything else."""
    if value is None:
        return None
    text = value.strip()
    seconds = parse_number(text)
    if seconds is None:
        parts = _DURATION_PART.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            return None
        seconds = sum(float(number) * _UNIT_S[unit] for number, unit in parts)
    return min(seconds, MAX_RESET_S) if math.isfinite(seconds) else None


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


def _positive(value: str | None) -> float | None:
    """A limit: zero counts as absent (a gateway's placeholder), as does nonsense."""
    number = parse_number(value)
    return number if number else None


def token_quotas(headers: Mapping[str, str], now: float | None = None) -> dict[str, TokenQuota]:
    """The token limits ``headers`` state, by kind (``TOKEN_KINDS``); none stated: {}."""
    found: dict[str, TokenQuota] = {}
    openai = TokenQuota(
        _positive(headers.get("x-ratelimit-limit-tokens")),
        parse_number(headers.get("x-ratelimit-remaining-tokens")),
        parse_duration(headers.get("x-ratelimit-reset-tokens")),
    )
    if openai.limit is not None or openai.remaining is not None:
        found["tokens"] = openai
    for kind in TOKEN_KINDS:
        prefix = f"anthropic-ratelimit-{kind.replace('_', '-')}-"
        remaining = parse_number(headers.get(prefix + "remaining"))
        rounded = remaining is not None and remaining > 0 and remaining % ANTHROPIC_ROUNDING == 0
        if rounded and remaining is not None:
            remaining -= ANTHROPIC_ROUNDING / 2
        quota = TokenQuota(
            _positive(headers.get(prefix + "limit")),
            remaining,
            parse_reset_time(headers.get(prefix + "reset"), now),
            rounded,
        )
        if quota.limit is not None or quota.remaining is not None:
            found[kind] = quota
    return found


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delay-seconds or an HTTP-date.

    Returns None for an absent or unparsable header (the backoff then applies alone) and
    0 for a date in the past. ``now`` (a Unix time) is for tests.
    """
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000" (zone unknown): RFC 9110 dates are GMT anyway
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


_TRY_AGAIN = re.compile(
    rb"(?:try again in|retry after) (\d+(?:\.\d+)?) ?(ms|milliseconds?|s|seconds?)\b", re.I
)
_BODY_HINT_BYTES = 2048
"""How much of a throttled answer's body is searched for its "try again in"."""


def retry_delay(headers: Mapping[str, str], body: bytes) -> float | None:
    """How long a throttled answer asks the client to wait, in seconds, capped at
    ``MAX_RESET_S``: Azure's ``retry-after-ms``, else ``Retry-After``, else the text of the
    body (OpenAI's 429: "Please try again in 287ms.", Azure's "Please retry after 3
    seconds"), which often comes without either header. None when none says."""
    seconds = parse_number(headers.get("retry-after-ms"))
    if seconds is not None:
        seconds /= 1000.0
    else:
        seconds = parse_retry_after(headers.get("Retry-After"))
    if seconds is None:
        match = _TRY_AGAIN.search(body[:_BODY_HINT_BYTES])
        if match is not None:
            seconds = float(match[1]) / (1000.0 if match[2].lower().startswith(b"m") else 1.0)
    return None if seconds is None else min(seconds, MAX_RESET_S)


def _parameters(value: str | None) -> dict[str, str]:
    """The ``;key=value`` parameters of a structured field's first item."""
    return dict(_PARAMETER.findall(value.split(",", 1)[0])) if value else {}


def _policy(value: str | None) -> tuple[float | None, float | None]:
    """(quota, window seconds) from ``100;w=60`` or ``"default";q=100;w=60``."""
    if not value:
        return None, None
    params = _parameters(value)
    head = value.split(",", 1)[0].split(";", 1)[0]
    quota = parse_number(params.get("q")) if "q" in params else parse_number(head)
    return quota, parse_duration(params.get("w"))


def quota_hint(headers: Mapping[str, str]) -> QuotaHint | None:
    """The quota ``headers`` report, or None when they carry no rate-limit field.

    ``headers`` must look names up case-insensitively (aiohttp's do). Tokens are not a
    request quota: a model endpoint's pacing reads them (:func:`token_quotas`).
    """
    remaining = headers.get("x-ratelimit-remaining-requests")
    if remaining is not None or "x-ratelimit-limit-requests" in headers:
        return QuotaHint(
            parse_number(remaining),
            parse_duration(headers.get("x-ratelimit-reset-requests")),
            _positive(headers.get("x-ratelimit-limit-requests")),
        )  # no window: the period is not in these headers (OpenAI's is a minute)
    remaining = headers.get("anthropic-ratelimit-requests-remaining")
    if remaining is not None or "anthropic-ratelimit-requests-limit" in headers:
        return QuotaHint(
            parse_number(remaining),
            parse_reset_time(headers.get("anthropic-ratelimit-requests-reset")),
            _positive(headers.get("anthropic-ratelimit-requests-limit")),
        )
    structured = headers.get("RateLimit")
    if structured is not None:
        params = _parameters(structured)
        quota, window = _policy(headers.get("RateLimit-Policy"))
        return QuotaHint(
            parse_number(params.get("r")), parse_duration(params.get("t")), quota, window
        )
    remaining = headers.get("RateLimit-Remaining")
    if remaining is None:
        return None
    quota, window = _policy(headers.get("RateLimit-Policy"))
    if quota is None:
        quota = parse_number(headers.get("RateLimit-Limit"))
    return QuotaHint(
        parse_number(remaining), parse_duration(headers.get("RateLimit-Reset")), quota, window
    )
