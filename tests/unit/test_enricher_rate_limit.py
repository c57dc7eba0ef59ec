"""The AIMD concurrency limit."""

import asyncio

from spark_jobs.enrichers.rate_limit import AdaptiveConcurrency


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
