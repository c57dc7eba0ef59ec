"""The hot path's deadline: moved later lazily, sooner at once, as asyncio.timeout_at."""

from __future__ import annotations

import asyncio

import pytest

from spark_jobs.asyncwait import Deadline


def now() -> float:
    return asyncio.get_running_loop().time()


async def test_a_deadline_moved_later_fires_at_the_new_moment_not_the_armed_one():
    with pytest.raises(TimeoutError):
        async with Deadline(now() + 0.05) as deadline:
            deadline.move(now() + 1.0)
            await asyncio.sleep(0.2)  # past the armed moment: the handle re-arms
            assert not deadline.expired()
            await asyncio.sleep(30)
    assert deadline.expired()


async def test_a_deadline_moved_sooner_fires_sooner():
    started = now()
    with pytest.raises(TimeoutError):
        async with Deadline(started + 60) as deadline:
            deadline.move(now() + 0.05)
            await asyncio.sleep(30)
    assert now() - started < 30


async def test_a_deadline_lifted_never_fires():
    async with Deadline(now() + 0.05) as deadline:
        deadline.move(None)
        await asyncio.sleep(0.2)
    assert not deadline.expired()


async def test_a_deadline_set_again_after_its_handle_fired_lifted_is_armed_again():
    with pytest.raises(TimeoutError):
        async with Deadline(now() + 0.01) as deadline:
            deadline.move(None)
            await asyncio.sleep(0.1)  # the armed handle fires and finds no deadline
            deadline.move(now() + 0.05)
            await asyncio.sleep(30)


async def test_a_cancellation_from_outside_stays_a_cancellation():
    entered = asyncio.Event()

    async def block():
        async with Deadline(now() + 60):
            entered.set()
            await asyncio.sleep(60)

    task = asyncio.create_task(block())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_an_expired_deadline_leaves_the_task_uncancelled():
    async def block():
        with pytest.raises(TimeoutError):
            async with Deadline(now() + 0.01):
                await asyncio.sleep(60)
        return asyncio.current_task().cancelling()

    assert await asyncio.create_task(block()) == 0


async def test_a_deadline_never_fires_before_its_moment():
    for offset in (0.0, 0.001, 0.0137, 0.02, 0.0499):
        when = now() + offset
        with pytest.raises(TimeoutError):
            async with Deadline(when):
                await asyncio.sleep(30)
        assert now() >= when


async def test_deadlines_of_one_tick_share_one_timer_and_the_lifted_ones_never_fire(monkeypatch):
    loop = asyncio.get_running_loop()
    timers = []
    call_at = loop.call_at
    monkeypatch.setattr(loop, "call_at", lambda *a, **k: timers.append(a) or call_at(*a, **k))
    when = now() + 0.05
    fired = []

    async def block(i: int):
        try:
            async with Deadline(when):
                await asyncio.sleep(0 if i % 2 else 30)  # the even ones wait for it
        except TimeoutError:
            fired.append(i)

    await asyncio.gather(*(block(i) for i in range(1000)))
    near = [t for t in timers if t[0] < when + 1]  # the sleeps' timers are 30 s away
    assert len(near) <= 2  # one for the tick ``when`` falls in (two if it fell on an edge)
    assert sorted(fired) == list(range(0, 1000, 2))
