"""The concurrency limits: the fixed cap, and the latency-guided limit against a simulated
server that decodes a batch at once and queues the rest (time is the simulation's)."""

from __future__ import annotations

import asyncio
import heapq
import random
import statistics
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs.enrichers.concurrency import (
    BETA,
    REFRESH_S,
    ConcurrencyLimit,
    LatencyLimit,
    concurrency_limit,
)


def test_the_fixed_cap_is_never_exceeded_whatever_the_answers():
    limiter = ConcurrencyLimit(4)
    assert [limiter.try_acquire() for _ in range(6)] == [True] * 4 + [False] * 2
    for latency in (None, 0.01, 100.0, None):  # errors, fast and slow answers alike
        limiter.release(latency)
        assert limiter.try_acquire() and not limiter.try_acquire()
    assert limiter.limit == 4 and limiter.in_flight == 4 and limiter.decreases == 0


def test_the_provider_names_the_limiter():
    assert type(concurrency_limit(8)) is ConcurrencyLimit
    assert type(concurrency_limit(8, "latency")) is LatencyLimit
    with pytest.raises(ValueError, match="capacity"):
        ConcurrencyLimit(0)


@pytest.mark.parametrize("kind", ["fixed", "latency"])
async def test_waiters_get_slots_in_order_and_cancelled_waiters_leave(kind):
    limiter = concurrency_limit(1, kind)
    await limiter.acquire()
    order = []

    async def worker(name):
        await limiter.acquire()
        order.append(name)
        await asyncio.sleep(0)
        limiter.release(0.01)

    a = asyncio.create_task(worker("a"))
    b = asyncio.create_task(worker("b"))
    c = asyncio.create_task(worker("c"))
    await asyncio.sleep(0)
    b.cancel()
    await asyncio.sleep(0)
    limiter.release()
    await asyncio.gather(a, c)
    assert order == ["a", "c"]
    assert b.cancelled()
    assert limiter.in_flight == 0


async def test_a_waiter_cancelled_after_its_hand_over_passes_the_slot_on():
    limiter = ConcurrencyLimit(1)
    await limiter.acquire()
    first = asyncio.create_task(limiter.acquire())
    second = asyncio.create_task(limiter.acquire())
    await asyncio.sleep(0)
    limiter.release()  # handed to `first`, which has not run yet
    first.cancel()
    await second
    assert first.cancelled() and limiter.in_flight == 1
    limiter.release()
    assert limiter.in_flight == 0


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(["fixed", "latency"]),
    capacity=st.integers(1, 6),
    steps=st.lists(st.tuples(st.integers(0, 9), st.floats(0.001, 1.0)), max_size=80),
)
def test_any_order_of_answers_and_cancellations_keeps_every_slot(kind, capacity, steps):
    """Random completion and cancellation orders: never more in flight than the limit,
    never a limit outside [1, capacity], and every slot back once all is done."""

    async def scenario():
        limiter = concurrency_limit(capacity, kind)
        holders: list[asyncio.Task] = []

        async def hold(latency):
            await limiter.acquire()
            try:
                await asyncio.Event().wait()  # until its answer (a cancellation) comes
            finally:
                limiter.release(latency)

        for pick, latency in steps:
            holders = [t for t in holders if not t.done()]
            if pick < 5 or not holders:
                holders.append(asyncio.create_task(hold(latency if pick % 2 else None)))
            else:
                holders[pick % len(holders)].cancel()
            for _ in range(pick % 3):
                await asyncio.sleep(0)
            assert 1 <= limiter.limit <= capacity
            assert limiter.in_flight <= capacity
        for task in holders:
            task.cancel()
        await asyncio.gather(*holders, return_exceptions=True)
        return limiter

    limiter = asyncio.run(scenario())
    assert limiter.in_flight == 0 and not limiter._waiters


@dataclass
class BatchServer:
    """A simulated self-hosted server: ``batch`` requests served at once, each taking
    ``service_s``, the rest queued in arrival order (``demo/batch_scheduler.py``'s shape)."""

    batch: int
    service_s: float
    now: float = 0.0
    _events: list[tuple[float, int]] = field(default_factory=list)  # (done at, sent at id)
    _queue: list[int] = field(default_factory=list)
    _sent: dict[int, float] = field(default_factory=dict)
    _in_service: int = 0
    _ids: int = 0
    _jitter: random.Random = field(default_factory=lambda: random.Random(7))

    def send(self) -> None:
        self._ids += 1
        self._sent[self._ids] = self.now
        self._queue.append(self._ids)
        self._start()

    def _start(self) -> None:
        while self._queue and self._in_service < self.batch:
            self._in_service += 1
            took = self.service_s * self._jitter.uniform(0.9, 1.1)  # answers' lengths vary
            heapq.heappush(self._events, (self.now + took, self._queue.pop(0)))

    def next_answer(self) -> float:
        """Advance to the next answer; its latency."""
        self.now, request = heapq.heappop(self._events)
        self._in_service -= 1
        self._start()
        return self.now - self._sent.pop(request)


def drive(limiter: LatencyLimit, server: BatchServer, answers: int) -> tuple[list[float], float]:
    """A client with records to spare keeps the limit in flight; (latencies, seconds)."""
    started, latencies = server.now, []
    for _ in range(answers):
        while limiter.try_acquire():
            server.send()
        latency = server.next_answer()
        latencies.append(latency)
        limiter.release(latency)
    return latencies, server.now - started


def simulated(batch: int, service_s: float = 0.1, capacity: int = 64):
    server = BatchServer(batch, service_s)
    return LatencyLimit(capacity, clock=lambda: server.now), server


@pytest.mark.parametrize("batch", [4, 8, 16])
def test_the_limit_finds_the_batch_and_keeps_latency_near_the_unloaded(batch):
    limiter, server = simulated(batch)
    drive(limiter, server, 300)  # slow start and settling
    latencies, seconds = drive(limiter, server, 2000)
    assert batch <= limiter.limit <= batch + BETA + 1
    throughput = len(latencies) / seconds
    assert throughput >= 0.9 * batch / server.service_s
    assert statistics.median(latencies) <= 1.5 * server.service_s
    assert limiter.rtt_noload == pytest.approx(server.service_s, rel=0.1)


def test_the_limit_shrinks_as_latency_rises_and_grows_back():
    limiter, server = simulated(8)
    drive(limiter, server, 500)
    assert 8 <= limiter.limit <= 12
    server.batch = 3  # the server serves fewer at once: the queue, and latency, rise
    drive(limiter, server, 500)
    assert 3 <= limiter.limit <= 3 + BETA + 1 and limiter.decreases >= 4
    server.batch = 8
    drive(limiter, server, 800)
    assert 8 <= limiter.limit <= 12


def test_the_unloaded_latency_is_measured_again_and_may_rise():
    limiter, server = simulated(8, service_s=0.1)
    drive(limiter, server, 500)
    server.service_s = 0.3  # longer answers: slower, but no more queued
    drive(limiter, server, int(3 * REFRESH_S * 8 / 0.3))  # a few refresh periods
    assert limiter.rtt_noload == pytest.approx(0.3, rel=0.1)
    assert 8 <= limiter.limit <= 12, "a stale unloaded latency would shrink it to ~BETA"


def test_no_growth_beyond_capacity_nor_without_the_limit_being_reached():
    limiter, server = simulated(100, capacity=5)
    drive(limiter, server, 400)
    assert limiter.limit == 5 and limiter.in_flight <= 5
    clock = [0.0]
    idle = LatencyLimit(64, clock=lambda: clock[0])
    for _ in range(200):  # one request at a time: no evidence that more would do
        assert idle.try_acquire()
        clock[0] += 0.1
        idle.release(0.1)
    assert idle.limit <= 4, "grows only while half of the limit is in use"
