"""The race of a slow call and its hedge: a hedge with no free slot is asked again while
the first call is out, and the loser is cancelled; a percentile delay is known only once
enough answers were seen."""

import asyncio

from spark_jobs.enrichers.hedging import HedgeDelay, race


def test_a_percentile_delay_waits_for_enough_answers_then_is_that_percentile():
    delay = HedgeDelay(percentile=90.0)
    for millis in range(1, 32):  # 31 answers: too few to know a tail
        delay.observe(millis / 1000)
        assert delay.current() is None
    delay.observe(0.032)
    assert delay.current() == 0.029  # the 29th of 32 ordered latencies: p90


def test_a_fixed_delay_is_known_from_the_start_and_answers_do_not_move_it():
    delay = HedgeDelay(fixed_s=0.25)
    for _ in range(100):
        delay.observe(5.0)
    assert delay.current() == 0.25


async def test_a_hedge_without_a_free_slot_is_asked_again_until_it_goes():
    never = asyncio.Event()
    cancelled = []

    async def stalled_first() -> str:
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "first"

    async def answer() -> str:
        return "hedge"

    asked = []

    def hedge():
        asked.append(True)
        return answer() if len(asked) >= 3 else None  # no slot the first two times

    assert await asyncio.wait_for(race(stalled_first, hedge, 0.01), 30) == "hedge"
    assert len(asked) == 3 and cancelled == [True]


async def test_no_hedge_is_asked_for_once_the_first_call_has_answered():
    asked = []

    async def slow_first() -> str:
        await asyncio.sleep(0.05)
        return "first"

    def hedge():
        asked.append(True)
        return None  # never a free slot

    assert await asyncio.wait_for(race(slow_first, hedge, 0.01), 30) == "first"
    assert asked  # it was asked while the first was out, and not after
    count = len(asked)
    await asyncio.sleep(0.1)
    assert len(asked) == count
