"""Token bucket (on a fake clock) and the AIMD concurrency limit."""

import asyncio

import pytest

from spark_jobs.enrichers.rate_limit import AdaptiveConcurrency, TokenBucket


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bucket_spaces_acquisitions_at_the_rate():
    clock = FakeClock()
    bucket = TokenBucket(rate=10, clock=clock)
    waits = [bucket.reserve() for _ in range(5)]
    assert waits == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])


def test_bucket_does_not_save_up_idle_time_beyond_the_burst():
    clock = FakeClock()
    bucket = TokenBucket(rate=10, burst=3, clock=clock)
    clock.now += 60  # a long idle period earns no more than ``burst`` tokens
    waits = [bucket.reserve() for _ in range(5)]
    assert waits == pytest.approx([0.0, 0.0, 0.0, 0.1, 0.2])


def test_bucket_rejects_bad_settings():
    with pytest.raises(ValueError, match="rate"):
        TokenBucket(0)
    with pytest.raises(ValueError, match="burst"):
        TokenBucket(1, burst=0.5)


async def test_bucket_acquire_sleeps_for_its_slot():
    bucket = TokenBucket(rate=50)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.gather(*(bucket.acquire() for _ in range(11)))
    assert loop.time() - started == pytest.approx(0.2, abs=0.05)


def test_isolated_429s_never_cut_the_limit():
    limiter = AdaptiveConcurrency(maximum=16, window=20, throttle_share=0.1)
    for answer in range(200):  # one 429 in 25 answers: 4%, below the 10% share
        ticket = limiter.try_acquire()
        limiter.release(ticket, throttled=answer % 25 == 0, success=answer % 25 != 0)
    assert limiter.limit == 16 and limiter.decreases == 0


def test_sustained_throttling_halves_once_per_window_and_successes_recover():
    limiter = AdaptiveConcurrency(maximum=16, window=4, throttle_share=0.5)
    tickets = [limiter.try_acquire() for _ in range(16)]
    assert limiter.try_acquire() is None  # full
    for ticket in tickets[:3]:
        limiter.release(ticket, throttled=True)
    assert limiter.limit == 16  # three answers: not yet a full window
    limiter.release(tickets[3], throttled=True)
    assert limiter.limit == 8 and limiter.decreases == 1
    # Answers to requests sent before the cut are no news about the new limit.
    for ticket in tickets[4:8]:
        limiter.release(ticket, throttled=True)
    assert limiter.limit == 8 and limiter.decreases == 1
    # The window is full of 429s: successes do not grow the limit until they dominate.
    limiter.release(tickets[8], success=True)
    limiter.release(tickets[9], success=True)
    assert limiter.limit == 8
    for ticket in tickets[10:]:
        limiter.release(ticket, success=True)
    assert limiter.limit == 14  # one slot per success once the share is low
    assert limiter.in_flight == 0


def test_limit_never_drops_below_one_nor_grows_above_maximum():
    limiter = AdaptiveConcurrency(maximum=4, window=1, throttle_share=1.0)
    for _ in range(5):
        limiter.release(limiter.try_acquire(), throttled=True)
    assert limiter.limit == 1
    for _ in range(10):
        limiter.release(limiter.try_acquire(), success=True)
    assert limiter.limit == 4


async def test_waiters_get_slots_in_order_and_cancelled_waiters_leave():
    limiter = AdaptiveConcurrency(maximum=1)
    first = await limiter.acquire()
    order = []

    async def worker(name):
        ticket = await limiter.acquire()
        order.append(name)
        await asyncio.sleep(0)
        limiter.release(ticket, success=True)

    a = asyncio.create_task(worker("a"))
    b = asyncio.create_task(worker("b"))
    c = asyncio.create_task(worker("c"))
    await asyncio.sleep(0)
    b.cancel()
    await asyncio.sleep(0)
    limiter.release(first)
    await asyncio.gather(a, c)
    assert order == ["a", "c"]
    assert b.cancelled()
    assert limiter.in_flight == 0
