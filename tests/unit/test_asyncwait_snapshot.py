"""Snapshot and restore of the operator's queue: outcomes and retry budgets survive."""

import asyncio
import contextlib
import json

from spark_jobs.asyncwait import (
    MAX_WATERMARK,
    AsyncWaitOperator,
    Failure,
    OperatorSnapshot,
    Result,
    RetryStrategy,
    Watermark,
)
from spark_jobs.asyncwait.elements import MAX_ERROR_CHARS, describe_error
from tests.unit.asyncwait_support import ConcurrencyProbe


async def run_until(op, source, outputs_wanted, restored=None):
    """Consume ``outputs_wanted`` outputs, snapshot, stop: a crash right after a snapshot."""
    outputs = []
    async with contextlib.aclosing(op.run(source, restored=restored)) as stream:
        async for out in stream:
            outputs.append(out)
            if len(outputs) == outputs_wanted:
                break
        await asyncio.sleep(0.02)  # let more calls complete before the cut
        return outputs, op.snapshot()


async def test_snapshot_holds_pending_entries_in_queue_order_with_outcomes():
    release = asyncio.Event()

    async def fn(record):
        if record == 1:
            await release.wait()  # the ordered head blocks everything behind it
        if record == 3:
            raise ValueError("bad 3")
        return record * 10

    op = AsyncWaitOperator(fn, mode="ordered", capacity=10)
    emitted, snap = await run_until(op, [0, 1, 2, Watermark(5), 3, 4], outputs_wanted=1)
    assert emitted == [Result(0, 0, 1)]
    assert snap.consumed == 6
    assert snap.entries == [
        {"record": 1, "attempts": 0},
        {"record": 2, "attempts": 1, "value": 20},
        {"watermark": 5},
        {"record": 3, "attempts": 1, "error": "ValueError: bad 3"},
        {"record": 4, "attempts": 1, "value": 40},
    ]
    assert OperatorSnapshot.from_dict(json.loads(json.dumps(snap.to_dict()))) == snap


async def test_restore_emits_completed_entries_without_calling_again():
    calls = []

    async def fn(record):
        calls.append(record)
        return record * 10

    snap = OperatorSnapshot(
        entries=[
            {"record": 1, "attempts": 0},
            {"record": 2, "attempts": 1, "value": 20},
            {"watermark": 5},
            {"record": 3, "attempts": 2, "error": "ValueError: bad 3"},
        ],
        consumed=4,
    )
    op = AsyncWaitOperator(fn, mode="ordered", capacity=2)
    outputs = [o async for o in op.run([4], restored=snap)]
    assert outputs == [
        Result(1, 10, 1),
        Result(2, 20, 1),
        Watermark(5),
        Failure(3, "ValueError: bad 3", 2),
        Result(4, 40, 1),
        Watermark(MAX_WATERMARK),
    ]
    assert calls == [1, 4]
    assert op.snapshot().consumed == 5


async def test_restore_continues_the_retry_budget():
    calls = []

    async def always_down(record):
        calls.append(record)
        raise ConnectionError("down")

    snap = OperatorSnapshot(entries=[{"record": 1, "attempts": 2}], consumed=1)
    op = AsyncWaitOperator(always_down, retry=RetryStrategy.fixed_delay(3, 0.0))
    outputs = [o async for o in op.run([], restored=snap)]
    assert outputs[0] == Failure(1, "ConnectionError: down", 3, transient=True)
    assert calls == [1]  # one call left of three, not three new ones


async def test_restored_entries_respect_capacity():
    probe = ConcurrencyProbe()
    snap = OperatorSnapshot(entries=[{"record": i, "attempts": 0} for i in range(10)], consumed=10)
    op = AsyncWaitOperator(probe, capacity=3)
    gen = op.run([], restored=snap)
    first = await gen.__anext__()
    assert first.record == 0
    assert len(op.snapshot().entries) == 9  # queued + not yet admitted, none lost
    rest = [o async for o in gen]
    assert [o.record for o in rest[:-1]] == list(range(1, 10))
    assert probe.peak <= 3


async def test_emitted_outputs_are_never_in_a_snapshot():
    async def fn(record):
        return record

    op = AsyncWaitOperator(fn, mode="unordered", capacity=4)
    seen = set()
    async for out in op.run(range(30)):
        if isinstance(out, Result):
            seen.add(out.record)
        pending = {e["record"] for e in op.snapshot().entries if "record" in e}
        assert not pending & seen


def test_asyncwait_error_texts_are_bounded_as_they_wait_in_snapshots():
    """A failure waits in the queue, and so in snapshots: a user's function raising with a
    megabyte of message must not make a commit its reader refuses."""
    text = describe_error(ValueError("m" * 1_000_000))
    assert len(text) == MAX_ERROR_CHARS and text.startswith("ValueError: mmm")
    assert describe_error(KeyError("k")) == "KeyError: 'k'"


def test_asyncwait_error_texts_hold_no_lone_surrogate():
    """The text goes into a UTF-8 column: a message quoting a hostile answer or header
    with a lone surrogate must not fail the batch it lands in."""
    text = describe_error(ValueError("bad \ud800 value é"))
    assert text == "ValueError: bad \\ud800 value é"
    text.encode("utf-8")
