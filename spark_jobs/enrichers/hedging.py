"""Hedged requests: a second attempt for a call that is slower than its peers.

Tail latency of an upstream is mostly bad luck (a GC pause, a slow replica, a lost
packet): the same request sent again usually comes back at the median. So after
``hedge_after`` seconds, or the chosen percentile of recent latencies, a second request
goes out; the first useful answer wins and the other is cancelled. Both are paid for
(counters, rate budget), which is why it is off by default and only for idempotent
methods. Flink, Spark and Ray Data offer nothing like it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TypeVar

from .errors import RetryableError

T = TypeVar("T")

_SAMPLES = 256  # latencies kept for the percentile
_MIN_SAMPLES = 20  # no percentile hedging before this many answers: too little to know
_RECOMPUTE_EVERY = 32  # answers between two recomputations of the percentile
RETRY_S = 0.02
"""A hedge with no free slot is asked again this often (about one rate slot at 50/s)."""


class HedgeDelay:
    """When to hedge: a fixed delay, or a percentile of the recent successful latencies."""

    def __init__(self, *, fixed_s: float | None = None, percentile: float | None = None) -> None:
        self.fixed_s = fixed_s
        self.percentile = percentile
        self._latencies: deque[float] = deque(maxlen=_SAMPLES)
        self._since_recompute = 0
        self._current: float | None = fixed_s

    def observe(self, latency_s: float) -> None:
        """One successful answer's latency (used only for percentile hedging)."""
        if self.percentile is None:
            return
        self._latencies.append(latency_s)
        self._since_recompute += 1
        if len(self._latencies) >= _MIN_SAMPLES and self._since_recompute >= _RECOMPUTE_EVERY:
            self._since_recompute = 0
            ordered = sorted(self._latencies)
            index = min(len(ordered) - 1, int(len(ordered) * self.percentile / 100))
            self._current = ordered[index]

    def current(self) -> float | None:
        """Seconds to wait before hedging; None while there is nothing to go on."""
        return self._current


async def race(
    first: Callable[[], Awaitable[T]],
    hedge: Callable[[], Awaitable[T] | None],
    delay: float,
) -> T:
    """``first()``, and ``hedge()`` too if the first has not answered within ``delay``.

    The first *answer* wins: a value or a permanent error. A retryable failure (reset,
    stall, 5xx) of one leaves the other running; only when both fail is the first
    failure raised. ``hedge()`` may return None (no capacity for it right now): it is
    asked again every ``RETRY_S`` while the first call is out (calls hedged at the same
    moment, on a busy loop, would otherwise all but one go without). The loser is
    cancelled and awaited, so nothing outlives the call.
    """
    tasks = [asyncio.ensure_future(first())]
    try:
        done, _ = await asyncio.wait(tasks, timeout=delay)
        while not done:
            second = hedge()
            if second is not None:
                tasks.append(asyncio.ensure_future(second))
                break
            done, _ = await asyncio.wait(tasks, timeout=RETRY_S)
        pending = set(tasks)
        failure: BaseException | None = None
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done, key=tasks.index):
                error = task.exception()
                if error is None or not isinstance(error, RetryableError):
                    return task.result()
                failure = failure or error
        assert failure is not None
        raise failure
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
