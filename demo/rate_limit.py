"""The demo API's hard rate limit: what a metered public API does to an eager client.

``--rate-limit R`` admits at most R customer requests in each whole second since the
server started (a fixed window over the whole server, as many API gateways count) and
answers the rest 429 with ``Retry-After: 1`` right away, without the configured latency.
``--rate-limit-headers`` adds the quota left to every customer answer, the way real APIs
announce it, so a client's header parsing meets the real thing:

* ``openai``: ``x-ratelimit-limit-requests``, ``x-ratelimit-remaining-requests`` and
  ``x-ratelimit-reset-requests`` (a duration such as ``250ms``);
* ``ietf``: the draft's structured ``RateLimit: "default";r=<left>;t=<seconds>`` and
  ``RateLimit-Policy: "default";q=<R>;w=1``.

The limit is fixed for the life of the process (``/faults`` does not change it).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

RateLimitHeaders = Literal["none", "openai", "ietf"]
RATE_LIMIT_HEADERS: tuple[RateLimitHeaders, ...] = get_args(RateLimitHeaders)


@dataclass(frozen=True)
class RateLimit:
    """At most ``rate`` requests per whole second; 429 + ``Retry-After: 1`` beyond."""

    rate: float
    headers: RateLimitHeaders = "none"

    def __post_init__(self) -> None:
        if isinstance(self.rate, bool) or not (
            isinstance(self.rate, int | float) and math.isfinite(self.rate) and self.rate > 0
        ):
            raise ValueError(f"--rate-limit must be a number of requests/s > 0, got {self.rate!r}")
        if self.headers not in RATE_LIMIT_HEADERS:
            raise ValueError(
                f"--rate-limit-headers must be one of {', '.join(RATE_LIMIT_HEADERS)}, "
                f"got {self.headers!r}"
            )


class WindowCounter:
    """Counts requests in the current one-second window and decides each one."""

    def __init__(self, limit: RateLimit, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self._clock = clock
        self._started = clock()
        self._window = 0
        self._count = 0

    def admit(self) -> tuple[bool, dict[str, str]]:
        """Whether this request is within the limit, and the headers its answer carries."""
        elapsed = self._clock() - self._started
        window = math.floor(elapsed)
        if window != self._window:
            self._window, self._count = window, 0
        self._count += 1
        allowed = self._count <= self.limit.rate
        left = max(0, math.floor(self.limit.rate) - self._count)
        reset_s = window + 1 - elapsed
        headers = self._headers(left, reset_s)
        if not allowed:
            headers["Retry-After"] = "1"
        return allowed, headers

    def _headers(self, left: int, reset_s: float) -> dict[str, str]:
        style = self.limit.headers
        quota = f"{self.limit.rate:g}"
        if style == "openai":
            return {
                "x-ratelimit-limit-requests": quota,
                "x-ratelimit-remaining-requests": str(left),
                "x-ratelimit-reset-requests": f"{math.ceil(reset_s * 1000)}ms",
            }
        if style == "ietf":
            return {
                "RateLimit": f'"default";r={left};t={math.ceil(reset_s)}',
                "RateLimit-Policy": f'"default";q={quota};w=1',
            }
        return {}
