"""The demo model endpoint's limits: requests and tokens per window, as providers count.

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

    def admit(self, tokens: int) -> tuple[bool, dict[str, str]]:
        """Whether a call of ``tokens`` is within the limits, and its answer's headers."""
        elapsed = self.elapsed()
        window = int(elapsed // self.limits.window_s)
        if window != self._window:
            self._window, self.requests, self.tokens = window, 0, 0
        reset = (window + 1) * self.limits.window_s - elapsed
        limits = self.limits
        ok = (limits.requests is None or self.requests + 1 <= limits.requests) and (
            limits.tokens is None or self.tokens + tokens <= limits.tokens
        )
        if ok:
            self.requests += 1
            self.tokens += tokens
        return ok, self._headers(ok, reset)

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
