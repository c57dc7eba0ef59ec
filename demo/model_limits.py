"""The demo model endpoint's limit shapes: a fixed window, and a continuously refilled bucket.

Two shapes, because providers count in both: gateways and the demo's default profile count
a *fixed window*, OpenAI and Anthropic refill a *token bucket* continuously ("capacity is
continuously replenished up to your maximum limit", https://docs.anthropic.com/en/api/rate-limits;
OpenAI's reset is "the time until the rate limit resets to its initial state",
https://platform.openai.com/docs/guides/rate-limits). Which shape a provider uses, how a call
is charged and what its answers say is in ``provider_profiles.py``; both shapes take an
injectable clock so unit tests drive time.

A fixed window (``window_s``, a minute like OpenAI's and Anthropic's, or a few seconds to
keep a benchmark short) admits at most ``requests`` calls and ``tokens`` tokens (prompt and
completion, counted when the call arrives). Beyond either the call is answered 429 with
``Retry-After`` (whole seconds to the window's end) and OpenAI's headers, which every
answer carries:

``x-ratelimit-limit-requests``, ``x-ratelimit-remaining-requests``,
``x-ratelimit-reset-requests`` (a duration such as ``1.5s``), and the same for ``tokens``.

Windows follow each other from the endpoint's start; ``from_first_call=True`` opens the
first at the first call instead (a limiter that starts a key's window at its first
request, and a benchmark whose contenders each start at a window's start, not at
whatever point of one their start-up ended).

``nonsense=True`` is a misbehaving gateway: every one of those headers ``-1`` and no
``Retry-After``; the limits still hold.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelLimits:
    """At most ``requests`` calls and ``tokens`` tokens per ``window_s`` (None: no limit)."""

    requests: int | None = None
    tokens: int | None = None
    window_s: float = 60.0
    nonsense: bool = False
    from_first_call: bool = False

    def __post_init__(self) -> None:
        for name in ("requests", "tokens"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} per window must be an integer >= 1, got {value!r}")
        if not (math.isfinite(self.window_s) and self.window_s > 0):
            raise ValueError(f"window_s must be > 0, got {self.window_s!r}")


class LimitWindow:
    """Counts calls and tokens in the current window and decides each call."""

    def __init__(self, limits: ModelLimits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self._started: float | None = None if limits.from_first_call else clock()
        self._window = 0
        self.requests = 0
        self.tokens = 0

    def elapsed(self) -> float:
        """Seconds since the first window opened (windows are aligned to it)."""
        if self._started is None:  # opened by the first call
            self._started = self._clock()
        return self._clock() - self._started

    def reset_s(self) -> float:
        """Seconds to the current window's end (the counts start again from 0 there)."""
        elapsed = self.elapsed()
        window = int(elapsed // self.limits.window_s)
        if window != self._window:
            self._window, self.requests, self.tokens = window, 0, 0
        return (window + 1) * self.limits.window_s - elapsed

    def fits(self, tokens: int) -> bool:
        """Whether one more call of ``tokens`` is within this window's limits."""
        self.reset_s()  # turns the window if it ended
        limits = self.limits
        return (limits.requests is None or self.requests + 1 <= limits.requests) and (
            limits.tokens is None or self.tokens + tokens <= limits.tokens
        )

    def take(self, tokens: int) -> None:
        """Count one call of ``tokens`` in this window (checked with ``fits`` first)."""
        self.requests += 1
        self.tokens += tokens

    def admit(self, tokens: int) -> tuple[bool, dict[str, str]]:
        """Whether a call of ``tokens`` is within the limits, and its answer's headers."""
        ok = self.fits(tokens)
        if ok:
            self.take(tokens)
        return ok, self._headers(ok, self.reset_s())

    def _headers(self, ok: bool, reset: float) -> dict[str, str]:
        limits, headers = self.limits, {}
        for kind, limit, used in (
            ("requests", limits.requests, self.requests),
            ("tokens", limits.tokens, self.tokens),
        ):
            if limit is None:
                continue
            if limits.nonsense:
                values = ("-1", "-1", "-1")
            else:
                values = (str(limit), str(max(0, limit - used)), f"{reset:.3f}s")
            for name, value in zip(("limit", "remaining", "reset"), values, strict=True):
                headers[f"x-ratelimit-{name}-{kind}"] = value
        if not ok and not limits.nonsense:
            headers["Retry-After"] = str(max(1, math.ceil(reset)))
        return headers


class TokenBucket:
    """A limit of ``capacity`` per ``minute_s``, refilled continuously at capacity / minute_s
    a second, never above ``capacity``, and full at the start (a provider's bucket for a key
    that has not been used for a minute).

    ``take`` charges a call only if all of it fits (a provider refuses a request rather than
    admitting part of it); ``adjust`` corrects a charge afterwards (Anthropic's output
    tokens, estimated at ``max_tokens`` and settled when the answer ends) and may leave the
    level below zero when a call used more than it was charged."""

    def __init__(
        self, capacity: int, minute_s: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"a bucket's capacity must be an integer >= 1, got {capacity!r}")
        if not (math.isfinite(minute_s) and minute_s > 0):
            raise ValueError(f"minute_s must be > 0, got {minute_s!r}")
        self.capacity = capacity
        self.per_second = capacity / minute_s
        self._clock = clock
        self._level = float(capacity)
        self._at = clock()

    def level(self) -> float:
        """What the bucket holds now (refilled up to this moment)."""
        now = self._clock()
        self._level = min(self.capacity, self._level + (now - self._at) * self.per_second)
        self._at = now
        return self._level

    def take(self, amount: int) -> bool:
        """Charge ``amount`` if it fits now; False (nothing charged) if it does not."""
        if amount > self.level():
            return False
        self._level -= amount
        return True

    def adjust(self, delta: float) -> None:
        """Give back (``delta`` > 0) or charge more (< 0) of an earlier charge."""
        self._level = min(self.capacity, self.level() + delta)

    def seconds_until(self, amount: int) -> float:
        """Seconds until ``amount`` fits (0 now; infinite if it exceeds the capacity)."""
        if amount > self.capacity:
            return math.inf
        return max(0.0, (amount - self.level()) / self.per_second)

    def seconds_to_full(self) -> float:
        """Seconds until the bucket is full again: a provider's ``reset``."""
        return (self.capacity - self.level()) / self.per_second
