"""Property tests: random completion orders, failures, retries, timeouts and snapshot
points never lose, duplicate or reorder what the contracts forbid."""

import asyncio
import contextlib
from collections import Counter
from itertools import islice

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_jobs.asyncwait import (
    MAX_WATERMARK,
    AsyncWaitOperator,
    Failure,
    RetryStrategy,
    Watermark,
)
from tests.virtual_clock import run_on_virtual_clock

MAX_ATTEMPTS = 3
TIMEOUT = 0.2  # on the virtual clock: only a hung record ever waits this long

record_plan = st.fixed_dictionaries(
    {
        "yields": st.integers(0, 6),  # event-loop turns before the call answers
        "failures": st.integers(0, 4),  # failed calls before success
        "hang": st.sampled_from([False, False, False, True]),  # never answers: timeout
    }
)
scenario = st.fixed_dictionaries(
    {
        "plans": st.lists(record_plan, min_size=1, max_size=25),
        "watermark_after": st.sets(st.integers(0, 24), max_size=4),
        "mode": st.sampled_from(["ordered", "unordered"]),
        "capacity": st.integers(1, 8),
        "call_capacity": st.one_of(st.none(), st.integers(1, 8)),
        "fallback": st.booleans(),
        "snapshot_after": st.integers(0, 30),
    }
)


class Calls:
    """The async function under test; its behaviour per record comes from the plan and
    depends on how many of that record's calls have *finished* (a cancelled call does not
    count, exactly as the operator's attempt counter)."""

    def __init__(self, plans):
        self.plans = plans
        self.finished = Counter()
        self.started = Counter()
        self.first_calls_running = self.most_first_calls_running = 0

    async def __call__(self, record):
        plan = self.plans[record]
        self.started[record] += 1
        first = self.started[record] == 1  # retries may start beyond call_capacity
        self.first_calls_running += first
        self.most_first_calls_running = max(self.most_first_calls_running, self.first_calls_running)
        try:
            if plan["hang"]:
                await asyncio.sleep(10)
            for _ in range(plan["yields"]):
                await asyncio.sleep(0)
        finally:
            self.first_calls_running -= first
        self.finished[record] += 1
        if self.finished[record] <= plan["failures"]:
            raise ConnectionError(f"fail {self.finished[record]}")
        return f"value {record}"


def build_source(n, watermark_after):
    source = []
    for record in range(n):
        source.append(record)
        if record in watermark_after:
            source.append(Watermark(record))
    return source


def expected_outcome(record, plan, fallback):
    if plan["hang"]:
        return ("fallback",) if fallback else ("timeout",)
    if plan["failures"] >= MAX_ATTEMPTS:
        return ("failed", MAX_ATTEMPTS)
    return ("ok", plan["failures"] + 1)


def outcome_of(out):
    if isinstance(out, Failure):
        return ("timeout",) if out.error.startswith("TimeoutError") else ("failed", out.attempts)
    return ("fallback",) if out.value == "fallback" else ("ok", out.attempts)


def make_operator(calls, s):
    return AsyncWaitOperator(
        calls,
        mode=s["mode"],
        capacity=s["capacity"],
        call_capacity=s["call_capacity"],
        timeout=TIMEOUT,
        retry=RetryStrategy.fixed_delay(MAX_ATTEMPTS, 0.0),
        on_timeout=(lambda r: "fallback") if s["fallback"] else None,
    )


def check_contracts(outputs, source, s):
    records = [o for o in outputs if not isinstance(o, Watermark)]
    assert sorted(o.record for o in records) == list(range(len(s["plans"]))), "one output each"
    for out in records:
        assert outcome_of(out) == expected_outcome(
            out.record, s["plans"][out.record], s["fallback"]
        )
    marks = [o for o in outputs if isinstance(o, Watermark)]
    assert marks == [e for e in source if isinstance(e, Watermark)] + [Watermark(MAX_WATERMARK)]

    # Every record sits between the same watermarks as in the input.
    def boundaries(stream):
        seen, where = 0, {}
        for element in stream:
            if isinstance(element, Watermark):
                seen += 1
            else:
                where[element if isinstance(element, int) else element.record] = seen
        return where

    assert boundaries(outputs) == boundaries(source)
    if s["mode"] == "ordered":
        assert [o.record for o in records] == sorted(o.record for o in records)


def run(coro):
    """On a virtual clock: a record times out because it hangs, never because the machine
    was busy."""
    return run_on_virtual_clock(coro)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario)
def test_every_record_yields_exactly_one_output_in_contract_order(s):
    source = build_source(len(s["plans"]), s["watermark_after"])

    calls = Calls(s["plans"])

    async def main():
        op = make_operator(calls, s)
        return [o async for o in op.run(source)]

    check_contracts(run(main()), source, s)
    if s["call_capacity"] is not None:
        most = calls.most_first_calls_running
        assert most <= s["call_capacity"], "more records started than calls allowed"


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario)
def test_restore_from_any_snapshot_gives_the_same_outputs_once(s):
    source = build_source(len(s["plans"]), s["watermark_after"])
    calls = Calls(s["plans"])

    async def main():
        before = []
        op = make_operator(calls, s)
        async with contextlib.aclosing(op.run(source)) as stream:
            if s["snapshot_after"] > 0:
                async for out in stream:
                    before.append(out)
                    if len(before) == s["snapshot_after"]:
                        break
            snap = op.snapshot()  # between two outputs; then the "crash"
        if before and before[-1] == Watermark(MAX_WATERMARK):
            return before, []
        started_before = Counter(calls.started)
        completed_in_snapshot = {e["record"] for e in snap.entries if "value" in e or "error" in e}
        restored = make_operator(calls, s)
        rest = list(islice(source, snap.consumed, None))
        after = [o async for o in restored.run(rest, restored=snap)]
        new_calls = calls.started - started_before
        assert not completed_in_snapshot & set(new_calls), "completed entries were called again"
        return before, after

    before, after = run(main())
    check_contracts(before + after, source, s)
