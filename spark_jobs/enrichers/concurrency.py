"""How many requests may be in flight: a fixed cap, or the limit a server's latency allows.

An upstream complains about two things, and each has one owner. The request *rate* is
the rate controller's (``rate_control.RateController``: the one AIMD loop, which owns
every reaction to 429s and rate-limit headers). The requests *in flight* are capped here:

* :class:`ConcurrencyLimit` (``concurrency: fixed``, the default): at most ``capacity``,
  whatever the answers say. A second loop reacting to the same 429s would fight the
  first with other thresholds.
* :class:`LatencyLimit` (``concurrency: latency``; ``model.provider: self-hosted`` sets
  it): for a server that never throttles but queues. vLLM, llama.cpp's server and TGI
  decode a batch of requests at once and queue the rest without limit, with no rate
  headers and no 429, so a client that keeps ``capacity`` in flight only lengthens the
  queue: every answer waits, and long waits end in timeouts and resends the server has
  to serve again. This limit finds the concurrency that keeps the latency near the
  unloaded one (TCP Vegas's rule, as Netflix's ``concurrency-limits`` ``VegasLimit``).

Both take the fast path (no await, no allocation) while under the limit, because they
sit on the hot path of every request; the fixed cap's ``release`` does nothing else.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Literal, get_args

Concurrency = Literal["fixed", "latency"]
CONCURRENCIES: tuple[Concurrency, ...] = get_args(Concurrency)

ALPHA = 1.0
"""Grow while fewer requests than this are estimated to queue: TCP Vegas's alpha (Brakmo
and Peterson, "TCP Vegas", 1995: one buffer)."""
BETA = 2.0
"""Shrink while more than this are estimated to queue. Vegas's beta is 3 buffers; 2 here
for the latency target (median at most 1.5x the unloaded, issue 40), since a batch's own
slowdown reads as queue too: on the demo's self-hosted server (batch 8) a beta of 3
settled at 10 in flight and 1.5-1.6x the unloaded latency, 2 at 9 and 1.2-1.4x."""
REFRESH_S = 10.0
"""How long an unloaded latency stands before it is measured again: BBR's ``min_rtt``
window (10 s, draft-cardwell-iccrg-bbr-congestion-control), so it can rise when the
server or the answers get slower."""


def concurrency_limit(capacity: int, concurrency: Concurrency = "fixed") -> ConcurrencyLimit:
    """The limiter ``concurrency`` names, up to ``capacity`` requests in flight."""
    return LatencyLimit(capacity) if concurrency == "latency" else ConcurrencyLimit(capacity)


class ConcurrencyLimit:
    """A semaphore of ``capacity`` slots, handed to its waiters in order.

    Usage: ``if not limiter.try_acquire(): await limiter.acquire()``, then exactly one
    ``release(latency)`` per slot: the answer's latency in seconds, or None when there is
    no usable answer (an error, a transport failure, a cancellation). The fixed cap does
    not look at the latency.
    """

    decreases = 0
    """How often the limit shrank (the enricher's ``concurrency_decreases``): never here."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity!r}")
        self.capacity = capacity
        self.limit = capacity
        self.in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    def try_acquire(self) -> bool:
        """Take a slot if one is free right now (else ``await acquire()``)."""
        if self.in_flight < self.limit and not self._waiters:
            self.in_flight += 1
            return True
        return False

    async def acquire(self) -> None:
        if self.try_acquire():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # release() hands its slot over: in_flight already counts us
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._hand_over(self.in_flight - 1)  # handed a slot after all: pass it on
            elif waiter in self._waiters:  # not yet skipped over by _hand_over
                self._waiters.remove(waiter)
            raise

    def release(self, latency: float | None = None) -> None:
        self._hand_over(self.in_flight - 1)

    def _hand_over(self, in_flight: int) -> None:
        """``in_flight`` slots are taken now: wake waiters into the free ones."""
        waiters = self._waiters
        while waiters and in_flight < self.limit:
            waiter = waiters.popleft()
            if not waiter.done():
                in_flight += 1
                waiter.set_result(None)
        self.in_flight = in_flight


class LatencyLimit(ConcurrencyLimit):
    """A concurrency limit guided by latency: TCP Vegas's rule on the requests in flight.

    Once per round (as many answers as the limit), the round's answers per second ``X``
    and mean latency ``rtt`` say how many requests wait in the server's queue: by
    Little's law, ``X * (rtt - rtt_noload)``, where ``rtt_noload`` is the latency with no
    queue (Vegas's ``limit * (1 - rtt_noload / rtt)``, counting only the requests that
    reached the server). The limit grows by one while that queue is under ``ALPHA`` and
    shrinks by one while it is over ``BETA``; from 1 it doubles (slow start) until the
    queue first reaches ``ALPHA``, back to what the server serves at once (``X *
    rtt_noload``, at least half) if it overshot ``BETA``. It never leaves
    [1, ``capacity``], and grows only when at least half of it was at the server (``X *
    rtt``; Netflix's rule for an application-limited round): not while slots wait for
    the request rate, nor while the partition has fewer records left than the limit.

    The signal is a round's *mean* latency, not single answers, nor latency per
    completion token. A model's answers vary in length, but a round's mean averages that
    out, and the mean is what Little's law relates to the requests in flight. A per-token
    latency would need the prefill apart from the decoding (a long prompt with a short
    answer is all prefill, so its latency per token says nothing of the load), differs
    by server, and needs the usage out of every body; the mean needs only the clock and
    works for any API that queues.

    ``rtt_noload`` is the lowest round mean seen; a round after a change starts once
    the requests already out when the limit moved are answered. When it has not been
    renewed for ``REFRESH_S``, a round at half the limit, or at what the server serves
    at once if that is less (so no queue is left), measures it again and replaces it, so
    it can rise, then the limit comes back (BBR's ``ProbeRTT``).

    Where the server's batch slows each of its requests (a larger decode batch takes
    longer a step), that slowdown counts as queueing: the limit stops where latency is
    near the unloaded one, which may be short of a full batch. With a batch of one or two,
    the one request queued that keeps the server busy doubles the latency.
    """

    def __init__(self, capacity: int, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(capacity)
        self.limit = 1
        self.decreases = 0
        self.rtt_noload: float | None = None
        self._clock = clock
        self._measured_at = self._round_started = clock()
        self._slow_start = True
        self._probing_from: int | None = None  # the limit to come back to after a probe
        self._skip = 0  # answers of requests sent before the last change
        self._round_sum = 0.0
        self._round_answers = 0

    def release(self, latency: float | None = None) -> None:
        if self._skip:
            self._skip -= 1
            if not self._skip:
                self._round_started = self._clock()
        elif latency is not None:
            self._round_sum += latency
            self._round_answers += 1
            if self._round_answers >= self.limit:
                self._end_round()
        self._hand_over(self.in_flight - 1)

    def _end_round(self) -> None:
        now = self._clock()
        if now <= self._round_started:  # answers at one instant: no rate yet
            return
        rate = self._round_answers / (now - self._round_started)
        rtt = self._round_sum / self._round_answers
        self._round_sum, self._round_answers, self._round_started = 0.0, 0, now
        if self._probing_from is not None:  # the probe's mean replaces the old one
            self.rtt_noload, self._measured_at = rtt, now
            self._change(self._probing_from)
            self._probing_from = None
            return
        if self.rtt_noload is None or rtt < self.rtt_noload:
            self.rtt_noload, self._measured_at = rtt, now
        served = round(rate * self.rtt_noload)  # what the server serves without a queue
        if now - self._measured_at >= REFRESH_S:
            self._probing_from = self.limit
            self._change(min(self.limit // 2, served))
            return
        queue = rate * (rtt - self.rtt_noload)
        if queue > BETA:  # slow start overshot by up to twice: back to what is served
            self.decreases += 1
            self._change(max(self.limit // 2, served) if self._slow_start else self.limit - 1)
            self._slow_start = False
        elif queue >= ALPHA:
            self._slow_start = False
        elif 2 * rate * rtt >= self.limit:  # the limit held it back, not the input
            self._change(self.limit * 2 if self._slow_start else self.limit + 1)

    def _change(self, limit: int) -> None:
        """Move to ``limit`` (within [1, capacity]); the next round starts after the
        answers of the requests out now, which were sent under the old limit."""
        self.limit = min(max(limit, 1), self.capacity)
        self._skip = self.in_flight - 1  # the answer being released is not one of them
        if not self._skip:
            self._round_started = self._clock()
