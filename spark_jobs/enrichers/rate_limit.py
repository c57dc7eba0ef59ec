"""Client-side politeness: a concurrency limit that backs off under throttling.

Upstreams complain about two different things, so there are two limits: the request
*rate* (``rate_control.RateController``: AIMD on requests per second, under a given
``--requests-per-second`` as a hard ceiling) and the requests *in flight*, here:
:class:`AdaptiveConcurrency` caps them like TCP congestion control: a sustained share of
429s among recent answers halves the limit, and successes win it back quickly once the
throttling stops.

It takes the fast path (no await, no allocation) while under its limit, because it sits
on the hot path of every request.
"""

from __future__ import annotations

import asyncio
from collections import deque

from spark_jobs import defaults


class AdaptiveConcurrency:
    """A semaphore whose size halves under sustained throttling and grows back fast.

    Usage: ``ticket = await limiter.acquire()``, then exactly one of ``release(ticket)``
    (no answer: a transport error or a cancellation), ``release(ticket, success=True)``
    or ``release(ticket, throttled=True)``.

    Only a *share* of recent answers decides: the limit halves when at least
    ``throttle_share`` of the last ``window`` answers were 429s. An isolated 429 (the
    upstream's noise, or one hot key) then costs nothing, where halving on each one
    would collapse a busy partition to a trickle. After a cut the window starts empty,
    so the next cut needs fresh evidence; and the ticket (the decrease epoch the request
    started in) keeps a 429 sent before the cut from counting as news about the new
    limit. While the share stays low, every success adds one slot back: the limit
    doubles per round of requests, like TCP slow start, so it recovers within seconds.
    """

    def __init__(
        self,
        maximum: int,
        window: int = defaults.THROTTLE_WINDOW,
        throttle_share: float = defaults.THROTTLE_SHARE,
    ) -> None:
        if maximum < 1:
            raise ValueError(f"maximum must be >= 1, got {maximum!r}")
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window!r}")
        if not 0 < throttle_share <= 1:
            raise ValueError(f"throttle_share must be in (0, 1], got {throttle_share!r}")
        self.maximum = maximum
        self.limit = maximum
        self.in_flight = 0
        self.window = window
        self.throttle_share = throttle_share
        self.decreases = 0
        self._epoch = 0
        self._recent: deque[bool] = deque()  # True: throttled
        self._recent_throttled = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    def try_acquire(self) -> int | None:
        """A ticket if a slot is free right now, else None (then ``await acquire()``)."""
        if self.in_flight < self.limit and not self._waiters:
            self.in_flight += 1
            return self._epoch
        return None

    async def acquire(self) -> int:
        ticket = self.try_acquire()
        if ticket is not None:
            return ticket
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # release() hands its slot over: in_flight already counts us
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release_slot()  # handed a slot after all: pass it on
            elif waiter in self._waiters:  # not yet skipped over by _release_slot
                self._waiters.remove(waiter)
            raise
        return self._epoch

    def release(self, ticket: int, *, success: bool = False, throttled: bool = False) -> None:
        if throttled or success:
            self._observe(throttled)
            if throttled:
                if ticket == self._epoch and self._sustained():
                    self._decrease()
            elif self.limit < self.maximum and not self._sustained():
                self.limit += 1
        self._release_slot()

    def _observe(self, throttled: bool) -> None:
        recent = self._recent
        recent.append(throttled)
        self._recent_throttled += throttled
        if len(recent) > self.window:
            self._recent_throttled -= recent.popleft()

    def _sustained(self) -> bool:
        """Whether a full window of answers holds at least the throttled share."""
        return (
            len(self._recent) >= self.window
            and self._recent_throttled >= self.throttle_share * self.window
        )

    def _decrease(self) -> None:
        self._epoch += 1
        self._recent.clear()
        self._recent_throttled = 0
        if self.limit > 1:
            self.limit //= 2
            self.decreases += 1

    def _release_slot(self) -> None:
        self.in_flight -= 1
        while self._waiters and self.in_flight < self.limit:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.in_flight += 1
                waiter.set_result(None)
