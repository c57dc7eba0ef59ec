"""Client-side politeness: a request-rate budget and a concurrency limit that backs off.

Two different limits, because upstreams complain about two different things:

* :class:`TokenBucket` caps requests per second. The job's budget is split evenly across
  partitions, so the whole job stays within what the API owner granted, and every HTTP
  request takes a token (retries too: the server counts them).
* :class:`AdaptiveConcurrency` caps requests in flight, AIMD-style like TCP congestion
  control: a 429 halves the limit (at most once per round of requests in flight, so a
  burst of 429s from one round does not collapse it to 1), and successes add one slot
  back at a time.

Both take the fast path (no await, no allocation) while under their limit, because
they sit on the hot path of every request.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable


class TokenBucket:
    """At most ``rate`` acquisitions per second, ``burst`` of them back to back.

    Implemented as GCRA (virtual scheduling): each acquisition reserves the next slot on
    a timeline and sleeps until it, so waiters are served in arrival order without a
    lock or a wake-up task. ``burst`` defaults to one token: many partitions bursting at
    the same moment would add up to a spike far above the job's budget.
    """

    def __init__(
        self, rate: float, burst: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be > 0, got {rate!r}")
        if burst < 1:
            raise ValueError(f"burst must be >= 1, got {burst!r}")
        self.rate = rate
        self._interval = 1.0 / rate
        self._tolerance = (burst - 1.0) * self._interval
        self._clock = clock
        self._next = clock()  # the theoretical arrival time of the next token

    def reserve(self) -> float:
        """Take the next token; returns how many seconds to wait before using it."""
        now = self._clock()
        start = self._next if self._next > now else now
        self._next = start + self._interval
        wait = start - self._tolerance - now
        return wait if wait > 0 else 0.0

    async def acquire(self) -> None:
        wait = self.reserve()
        if wait:
            await asyncio.sleep(wait)


class AdaptiveConcurrency:
    """A semaphore whose size halves on throttling and grows back with successes.

    Usage: ``ticket = await limiter.acquire()``, then exactly one of ``release(ticket)``
    (any outcome but throttling), ``release(ticket, success=True)`` or
    ``release(ticket, throttled=True)``. The ticket is the decrease epoch the request
    started in: a 429 for a request sent before the latest decrease is old news about a
    load that has already been cut, so it does not cut again.
    """

    def __init__(self, maximum: int, recovery_successes: int = 10) -> None:
        if maximum < 1:
            raise ValueError(f"maximum must be >= 1, got {maximum!r}")
        if recovery_successes < 1:
            raise ValueError(f"recovery_successes must be >= 1, got {recovery_successes!r}")
        self.maximum = maximum
        self.limit = maximum
        self.in_flight = 0
        self.recovery_successes = recovery_successes
        self.decreases = 0
        self._epoch = 0
        self._successes = 0
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
        if throttled:
            if ticket == self._epoch:
                self._epoch += 1
                self._successes = 0
                if self.limit > 1:
                    self.limit //= 2
                    self.decreases += 1
        elif success and self.limit < self.maximum:
            self._successes += 1
            if self._successes >= self.recovery_successes:
                self._successes = 0
                self.limit += 1
        self._release_slot()

    def _release_slot(self) -> None:
        self.in_flight -= 1
        while self._waiters and self.in_flight < self.limit:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.in_flight += 1
                waiter.set_result(None)
