"""Throttled calls (``RetryStrategy.is_throttled``) spend no attempt: only the record's
timeout bounds them, while every other failure still counts against ``max_attempts``."""

import asyncio
import contextlib
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_jobs.asyncwait import AsyncWaitOperator, Failure, Result, RetryStrategy

MAX_ATTEMPTS = 3


class Throttled(Exception):
    """The server refused to work on the call (a 429)."""

    def __init__(self, retry_after: float | None = None) -> None:
        super().__init__("429")
        self.retry_after = retry_after


class Transient(Exception):
    """A failure that spends an attempt (a reset, a 500)."""


def strategy(max_attempts: int = MAX_ATTEMPTS, delay: float = 0.0) -> RetryStrategy:
    return RetryStrategy(
        max_attempts=max_attempts,
        initial_delay=delay,
        max_delay=delay,
        is_throttled=lambda error: isinstance(error, Throttled),
    )


class Planned:
    """Each record meets its plan's outcomes call by call: "throttled", "transient" or
    "ok"; past the plan it is throttled forever when ``then`` says so, else ok."""

    def __init__(self, plans: dict[int, tuple[list[str], str]]) -> None:
        self.plans = plans
        self.calls: Counter[tuple[int, str]] = Counter()
        self.made: Counter[int] = Counter()
        self.fifth_call = asyncio.Event()

    async def __call__(self, record: int) -> str:
        steps, then = self.plans[record]
        index = self.made[record]
        self.made[record] += 1
        if self.made[record] == 5:
            self.fifth_call.set()
        outcome = steps[index] if index < len(steps) else then
        self.calls[record, outcome] += 1
        await asyncio.sleep(0)
        if outcome == "throttled":
            raise Throttled()
        if outcome == "transient":
            raise Transient("reset")
        return f"ok {record}"


def test_a_throttled_call_spends_no_attempt_and_keeps_retry_after():
    retry = strategy()
    error = Throttled(retry_after=2.0)
    assert not retry.spends_attempt(error)
    assert retry.spends_attempt(Transient())
    assert retry.delay_after_exception(MAX_ATTEMPTS + 10, error) == 2.0
    assert retry.delay_after_exception(MAX_ATTEMPTS, Transient()) is None


def test_a_throttled_error_the_strategy_does_not_retry_still_fails_at_once():
    retry = RetryStrategy(
        max_attempts=5, retry_on_exception=lambda e: False, is_throttled=lambda e: True
    )
    assert retry.spends_attempt(Throttled())
    assert retry.delay_after_exception(1, Throttled()) is None


async def test_throttled_many_times_then_ok_counts_only_real_attempts():
    fn = Planned({1: (["throttled"] * 8 + ["transient", "throttled", "ok"], "ok")})
    op = AsyncWaitOperator(fn, retry=strategy(), timeout=30)
    [out] = [o async for o in op.run([1])][:-1]
    assert out == Result(1, "ok 1", 2)  # the transient failure and the success
    assert fn.made[1] == 11


async def test_a_record_throttled_forever_ends_by_its_timeout_as_transient():
    fn = Planned({1: ([], "throttled")})
    op = AsyncWaitOperator(fn, retry=strategy(delay=0.001), timeout=0.2)
    [out] = [o async for o in op.run([1])][:-1]
    assert isinstance(out, Failure) and out.transient
    assert out.error.startswith("TimeoutError")
    assert fn.made[1] > MAX_ATTEMPTS
    assert out.attempts <= 1  # at most the call the timeout cut


async def test_a_snapshot_carries_the_attempts_spent_not_the_throttled_calls():
    fn = Planned({1: (["transient", "throttled", "throttled"], "throttled")})
    op = AsyncWaitOperator(fn, retry=strategy(delay=0.001), timeout=30)
    async with contextlib.aclosing(op.run([1])) as stream:
        task = asyncio.ensure_future(anext(stream))
        await fn.fifth_call.wait()
        snapshot = op.snapshot()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    [entry] = snapshot.entries
    assert entry["attempts"] == 1  # the one transient failure
    restored = Planned({1: (["transient", "throttled", "ok"], "ok")})
    op = AsyncWaitOperator(restored, retry=strategy(), timeout=30)
    [out] = [o async for o in op.run([], restored=snapshot)][:-1]
    assert out == Result(1, "ok 1", 3)  # 1 before the snapshot, the transient, the ok


outcome = st.sampled_from(["throttled", "transient", "ok"])
plan = st.tuples(st.lists(outcome, max_size=8), st.sampled_from(["ok", "ok", "throttled"]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(plan, min_size=1, max_size=8), st.integers(1, 6))
def test_throttling_never_spends_attempts_loses_or_duplicates_records(plans, capacity):
    fn = Planned(dict(enumerate(plans)))

    async def main():
        # Long enough that a record whose few calls all answer at once never times out on
        # a machine busy with other tests (0.3 s did once); a throttled-forever one does.
        op = AsyncWaitOperator(
            fn, retry=strategy(delay=0.001), timeout=1.0, capacity=capacity, mode="unordered"
        )
        return [o async for o in op.run(range(len(plans)))][:-1]

    outputs = asyncio.run(main())
    assert sorted(o.record for o in outputs) == list(range(len(plans)))  # each once
    for out in outputs:
        spent = fn.calls[out.record, "transient"] + fn.calls[out.record, "ok"]
        assert spent <= MAX_ATTEMPTS, "non-throttled calls beyond the budget"
        steps, then = plans[out.record]
        if isinstance(out, Result):
            assert out.attempts == spent
        elif out.error.startswith("TimeoutError"):  # only a throttled record may time out
            assert then == "throttled" or "throttled" in steps
            assert fn.calls[out.record, "transient"] < MAX_ATTEMPTS
        else:  # its transient failures spent the budget
            assert out.error.startswith("Transient") and out.attempts == MAX_ATTEMPTS
            assert fn.calls[out.record, "transient"] == MAX_ATTEMPTS
