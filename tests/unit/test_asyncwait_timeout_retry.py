"""Timeouts and retries of the async wait operator: nothing lost, nothing doubled."""

import asyncio

import pytest

from spark_jobs.asyncwait import AsyncWaitOperator, Failure, Result, RetryStrategy, untimed
from tests.unit.asyncwait_support import ConcurrencyProbe


async def collect(op, source):
    return [o async for o in op.run(source)][:-1]  # drop the final max watermark


def flaky(failures_before_success: int, calls: list):
    async def fn(record):
        calls.append(record)
        if calls.count(record) <= failures_before_success:
            raise ConnectionError(f"reset #{calls.count(record)}")
        return f"ok {record}"

    return fn


async def test_timeout_without_handler_is_a_failure():
    async def hang(record):
        await asyncio.sleep(10)

    op = AsyncWaitOperator(hang, timeout=0.05)
    [out] = await collect(op, [1])
    assert isinstance(out, Failure) and out.error.startswith("TimeoutError")
    assert out.attempts == 1
    assert op.metrics.timed_out == 1


async def test_timeout_handler_supplies_a_fallback():
    async def hang(record):
        await asyncio.sleep(10)

    op = AsyncWaitOperator(hang, timeout=0.05, on_timeout=lambda record: {"fallback": record})
    assert await collect(op, [7]) == [Result(7, {"fallback": 7}, 1)]


async def test_async_timeout_handler_and_a_failing_one():
    async def hang(record):
        await asyncio.sleep(10)

    async def fallback(record):
        if record == 2:
            raise KeyError("no default")
        return 0

    op = AsyncWaitOperator(hang, timeout=0.05, on_timeout=fallback, mode="ordered")
    first, second = await collect(op, [1, 2])
    assert first == Result(1, 0, 1)
    assert isinstance(second, Failure) and "on_timeout failed: KeyError" in second.error


async def test_a_late_result_after_the_timeout_is_dropped():
    """A call that ignores its cancellation and answers late must not replace the timeout."""

    async def stubborn(record):
        try:
            await asyncio.sleep(0.2)
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)
            return "late"
        return "late"

    op = AsyncWaitOperator(stubborn, timeout=0.05, on_timeout=lambda r: "fallback")
    assert await collect(op, [1]) == [Result(1, "fallback", 1)]


async def test_fixed_delay_retries_until_success_counting_every_call():
    calls: list = []
    op = AsyncWaitOperator(flaky(2, calls), retry=RetryStrategy.fixed_delay(3, 0.01))
    assert await collect(op, [1]) == [Result(1, "ok 1", 3)]
    assert calls == [1, 1, 1]
    assert op.metrics.retried == 2


async def test_max_attempts_exhausted_becomes_a_failure_with_attempts():
    calls: list = []
    op = AsyncWaitOperator(flaky(5, calls), retry=RetryStrategy.fixed_delay(3, 0.0))
    [out] = await collect(op, [1])
    assert out == Failure(1, "ConnectionError: reset #3", 3, transient=True)
    assert len(calls) == 3


async def test_exception_predicate_stops_retrying_permanent_errors():
    calls: list = []

    async def fn(record):
        calls.append(record)
        raise PermissionError("403")

    strategy = RetryStrategy.fixed_delay(
        5, 0.0, retry_on_exception=lambda e: not isinstance(e, PermissionError)
    )
    [out] = await collect(AsyncWaitOperator(fn, retry=strategy), [1])
    assert isinstance(out, Failure) and out.attempts == 1 and calls == [1]
    assert out.transient is False  # permanent: not an outage symptom


async def test_result_predicate_retries_empty_results_and_keeps_the_last_one():
    answers = iter([[], [], ["found"]])

    async def fn(record):
        return next(answers)

    strategy = RetryStrategy.fixed_delay(3, 0.0, retry_on_result=lambda value: value == [])
    assert await collect(AsyncWaitOperator(fn, retry=strategy), [1]) == [Result(1, ["found"], 3)]


async def test_retry_after_on_the_exception_is_honoured():
    class Throttled(Exception):
        retry_after = 0.2

    calls: list[float] = []

    async def fn(record):
        calls.append(asyncio.get_running_loop().time())
        if len(calls) == 1:
            raise Throttled("429")
        return "ok"

    op = AsyncWaitOperator(fn, retry=RetryStrategy.fixed_delay(2, 0.01))
    await collect(op, [1])
    assert calls[1] - calls[0] >= 0.19


def test_exponential_backoff_grows_caps_and_jitters_down():
    strategy = RetryStrategy.exponential_backoff(10, 0.1, 1.0, multiplier=2.0, jitter=0.0)
    assert [strategy.backoff(n) for n in range(1, 7)] == pytest.approx(
        [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    )
    jittered = RetryStrategy.exponential_backoff(10, 0.1, 1.0, jitter=0.5, seed=1)
    delays = [jittered.backoff(3) for _ in range(100)]
    assert all(0.2 <= d <= 0.4 for d in delays) and len(set(delays)) > 50
    assert strategy.delay_after_exception(10, ValueError()) is None  # budget spent


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"jitter": 2.0}, "jitter"),
        ({"multiplier": 0.5}, "multiplier"),
    ],
)
def test_bad_retry_settings_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RetryStrategy(**kwargs)


async def test_timeout_during_a_pending_retry_yields_exactly_one_output():
    calls: list = []

    async def always_fails(record):
        calls.append(record)
        raise ConnectionError("down")

    op = AsyncWaitOperator(
        always_fails,
        timeout=0.1,
        retry=RetryStrategy.fixed_delay(5, 1.0),  # the timeout strikes while waiting to retry
        on_timeout=lambda r: "fallback",
    )
    outputs = await collect(op, [1, 2])
    assert outputs == [Result(1, "fallback", 1), Result(2, "fallback", 1)]
    assert calls == [1, 2]


async def test_timeout_covers_all_retries_together():
    async def slow_fail(record):
        await asyncio.sleep(0.04)
        raise ConnectionError("down")

    op = AsyncWaitOperator(slow_fail, timeout=0.1, retry=RetryStrategy.fixed_delay(10, 0.0))
    started = asyncio.get_running_loop().time()
    [out] = await collect(op, [1])
    assert isinstance(out, Failure) and out.error.startswith("TimeoutError")
    assert out.attempts == 3  # two finished calls + the one the timeout cut
    assert asyncio.get_running_loop().time() - started < 0.5


async def test_waiting_inside_untimed_does_not_count_against_the_timeout():
    """A wait for capacity other records hold (untimed) pauses the record's timer."""
    slot_free = asyncio.Event()

    async def fn(record):
        async with untimed():
            await slot_free.wait()
        return record

    async def free_the_slot_after_three_timeouts():
        await asyncio.sleep(0.3)
        slot_free.set()

    op = AsyncWaitOperator(fn, timeout=0.1)
    opener = asyncio.create_task(free_the_slot_after_three_timeouts())
    assert await collect(op, [1]) == [Result(1, 1, 1)]
    await opener


async def test_the_timer_resumes_with_what_was_left_after_untimed():
    async def fn(record):
        await asyncio.sleep(0.07)  # worked on: counts
        async with untimed():
            await asyncio.sleep(0.2)  # queueing: does not
        await asyncio.sleep(0.07)  # counts again: 0.14 s in all, over the 0.1 s budget
        return record

    [out] = await collect(AsyncWaitOperator(fn, timeout=0.1), [1])
    assert isinstance(out, Failure) and out.error.startswith("TimeoutError")


async def test_untimed_outside_an_operator_does_nothing():
    async with untimed():
        await asyncio.sleep(0)


async def test_a_deadline_passing_during_an_untimed_wait_leaves_the_rest_for_after_it():
    """The timer's one handle fires inside the wait; the record still has 0.05 s after."""

    async def fn(record):
        await asyncio.sleep(0.05)  # counts
        async with untimed():
            await asyncio.sleep(0.3)  # the 0.1 s deadline passes in here
        await asyncio.sleep(0.02)  # counts: 0.07 s in all
        return record

    assert await collect(AsyncWaitOperator(fn, timeout=0.1), [1]) == [Result(1, 1, 1)]


async def test_a_nested_untimed_wait_does_not_restart_the_timer_early():
    async def fn(record):
        async with untimed():
            async with untimed():
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)  # still inside the outer wait: does not count
        return record

    assert await collect(AsyncWaitOperator(fn, timeout=0.1), [1]) == [Result(1, 1, 1)]


async def test_call_capacity_bounds_the_calls_running_while_the_queue_holds_more():
    probe = ConcurrencyProbe()
    op = AsyncWaitOperator(probe, mode="unordered", capacity=8, call_capacity=2)
    outputs = await collect(op, range(20))
    assert sorted(o.value for o in outputs) == list(range(20)) and probe.peak == 2


async def test_a_record_backing_off_frees_its_call_for_the_next_record_at_once():
    """Two records fail and back off for 5 s; the other eight are started meanwhile (not
    after the backoff), though only two calls may run at once."""
    calls: list = []
    eight_done = asyncio.Event()

    async def fn(record):
        calls.append(record)
        if record < 2 and calls.count(record) == 1:
            raise ConnectionError("reset")
        if record >= 2 and len({r for r in calls if r >= 2}) == 8:
            eight_done.set()
        return record

    op = AsyncWaitOperator(
        fn,
        mode="unordered",
        capacity=10,
        call_capacity=2,
        retry=RetryStrategy.fixed_delay(2, 5.0),
    )
    run = asyncio.create_task(collect(op, range(10)))
    await asyncio.wait_for(eight_done.wait(), timeout=4.0)  # well inside the backoff
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run


def test_call_capacity_must_be_positive():
    with pytest.raises(ValueError, match="call_capacity"):
        AsyncWaitOperator(lambda r: r, call_capacity=0)
