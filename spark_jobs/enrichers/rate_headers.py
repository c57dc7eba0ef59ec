"""What an answer's rate-limit headers say about the quota left, read defensively.

Three conventions are understood:

* OpenAI style: ``x-ratelimit-limit-requests``, ``x-ratelimit-remaining-requests`` and
  ``x-ratelimit-reset-requests`` (also ``-tokens``), the reset in seconds or as a Go
  duration (``1s``, ``20ms``, ``6m0s``);
* the IETF draft's older fields ``RateLimit-Limit``, ``RateLimit-Remaining`` and
  ``RateLimit-Reset`` (seconds), with ``RateLimit-Policy: 100;w=60``;
* its structured form ``RateLimit: "default";r=50;t=30`` with
  ``RateLimit-Policy: "default";q=100;w=60``.

Header values come from the server and are hostile input: anything unparsable, negative,
NaN or infinite is ignored (as if absent), and a reset is capped at ``MAX_RESET_S`` so a
silly value can pause a partition for a while, never forever.
"""

from __future__ import annotations

import math
import re
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
        """A throttled answer carrying this is a rate limit, not an isolated refusal:
        its quota is spent, or it states a policy."""
        return self.exhausted or self.policy_rate is not None

    @property
    def policy_rate(self) -> float | None:
        """The policy's requests per second, when both its quota and its window are known."""
        if self.limit is None or not self.window_s:
            return None
        return self.limit / self.window_s


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

    ``headers`` must look names up case-insensitively (aiohttp's do). Of the OpenAI pair
    the more exhausted of requests and tokens wins: either refuses the next call.
    """
    remaining = headers.get("x-ratelimit-remaining-requests")
    tokens = headers.get("x-ratelimit-remaining-tokens")
    if remaining is not None or tokens is not None:
        return _openai(headers, remaining, tokens)
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


def _openai(headers: Mapping[str, str], requests: str | None, tokens: str | None) -> QuotaHint:
    limit = parse_number(headers.get("x-ratelimit-limit-requests"))
    reset = parse_duration(headers.get("x-ratelimit-reset-requests"))
    remaining = parse_number(requests)
    left_tokens = parse_number(tokens)
    if left_tokens is not None and left_tokens < 1 and (remaining is None or remaining >= 1):
        remaining = left_tokens
        reset = parse_duration(headers.get("x-ratelimit-reset-tokens"))
    # No window: the limit's period is not in the headers (OpenAI's is a minute, others'
    # a second), so only the remaining count and its reset guide the pacing.
    return QuotaHint(remaining, reset, limit)
