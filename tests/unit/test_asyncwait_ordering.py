"""Ordering, capacity, end-of-input and failure rules of the async wait operator."""

import asyncio
import contextlib
import random

import pytest

from spark_jobs.asyncwait import MAX_WATERMARK, AsyncWaitOperator, Failure, Result, Watermark


class ManualCalls:
    """An async function whose calls the test completes by hand, in any order
    (the role of Flink's ``ResultFuture`` in its queue tests)."""

    def __init__(self) -> None:
        self.pending: dict[object, asyncio.Future] = {}
        self.calls: list[object] = []
        self.cancelled: list[object] = []

    async def __call__(self, record):
        self.calls.append(record)
        future = asyncio.get_running_loop().create_future()
        self.pending[record] = future
        try:
            return await future
        except asyncio.CancelledError:
            self.cancelled.append(record)
            raise

    def complete(self, record, value=None):
        self.pending.pop(record).set_result(value if value is not None else f"v{record}")


async def settle():
    for _ in range(5):
        await asyncio.sleep(0)


async def drive(op, source, completion_order, calls: ManualCalls):
    """Run the operator while completing calls in ``completion_order``."""
    outputs = []

    async def consume():
        async for out in op.run(source):
            outputs.append(out)

    consumer = asyncio.create_task(consume())
    for record in completion_order:
        while record not in calls.pending:
            await settle()
        calls.complete(record)
        await settle()
    await asyncio.wait_for(consumer, 5)
    return outputs


@pytest.mark.parametrize("seed", range(5))
async def test_ordered_mode_emits_in_input_order_whatever_the_completion_order(seed):
    records = list(range(20))
    source = [*records[:10], Watermark(100), *records[10:]]
    order = records[:]
    random.Random(seed).shuffle(order)
    calls = ManualCalls()
    op = AsyncWaitOperator(calls, mode="ordered", capacity=30)
    outputs = await drive(op, source, order, calls)
    assert outputs == [
        *[Result(r, f"v{r}") for r in records[:10]],
        Watermark(100),
        *[Result(r, f"v{r}") for r in records[10:]],
        Watermark(MAX_WATERMARK),
    ]


async def test_unordered_mode_emits_in_completion_order_without_watermarks():
    calls = ManualCalls()
    op = AsyncWaitOperator(calls, mode="unordered", capacity=10)
    order = [3, 1, 4, 0, 2]
    outputs = await drive(op, range(5), order, calls)
    assert [o.record for o in outputs[:-1]] == order
    assert outputs[-1] == Watermark(MAX_WATERMARK)


async def test_unordered_mode_never_lets_a_record_cross_a_watermark():
    calls = ManualCalls()
    op = AsyncWaitOperator(calls, mode="unordered", capacity=10)
    source = [0, 1, Watermark(5), 2, 3]
    # Records after the watermark complete first; they must still wait for it.
    outputs = await drive(op, source, [3, 2, 1, 0], calls)
    records_and_marks = [o.record if isinstance(o, Result) else o for o in outputs]
    assert records_and_marks == [1, 0, Watermark(5), 3, 2, Watermark(MAX_WATERMARK)]


async def test_capacity_bounds_queue_and_source_reads():
    pulled = []

    def source():
        for i in range(50):
            pulled.append(i)
            yield i

    calls = ManualCalls()
    op = AsyncWaitOperator(calls, mode="ordered", capacity=4)
    gen = op.run(source())
    first = asyncio.create_task(gen.__anext__())
    await settle()
    assert len(pulled) == 4 and len(calls.pending) == 4  # blocked: nothing emitted yet
    calls.complete(1)
    await settle()
    assert len(pulled) == 4  # head (0) not done: ordered queue still full
    calls.complete(0)
    out = await first
    assert out.record == 0
    assert (await gen.__anext__()).record == 1  # ready output goes before new input
    assert len(pulled) == 4
    third = asyncio.create_task(gen.__anext__())
    await settle()
    assert len(pulled) == 6  # two slots freed by two emits: exactly two more read
    assert sorted(calls.pending) == [2, 3, 4, 5]
    third.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await third


async def test_watermarks_take_queue_slots():
    calls = ManualCalls()
    op = AsyncWaitOperator(calls, mode="unordered", capacity=3)
    gen = op.run([0, Watermark(1), Watermark(2), 1])
    task = asyncio.create_task(gen.__anext__())
    await settle()
    assert calls.calls == [0]  # 0 + two watermarks fill the queue; 1 is not read
    calls.complete(0)
    assert (await task).record == 0
    await gen.aclose()


async def test_failures_become_outputs_and_the_stream_goes_on():
    async def fn(record):
        if record % 3 == 0:
            raise ValueError(f"bad record {record}")
        return record

    op = AsyncWaitOperator(fn, mode="ordered", capacity=4)
    outputs = [o async for o in op.run(range(7))]
    failures = [o for o in outputs if isinstance(o, Failure)]
    assert [f.record for f in failures] == [0, 3, 6]
    assert failures[0].error == "ValueError: bad record 0" and failures[0].attempts == 1
    assert [o.record for o in outputs if isinstance(o, Result)] == [1, 2, 4, 5]
    assert op.metrics.failed == 3 and op.metrics.completed == 4


async def test_end_of_input_drains_then_emits_max_watermark():
    async def fn(record):
        await asyncio.sleep(0.01 * (3 - record))
        return record

    op = AsyncWaitOperator(fn, mode="unordered", capacity=10)
    outputs = [o async for o in op.run(range(4))]
    assert sorted(o.record for o in outputs[:-1]) == [0, 1, 2, 3]
    assert outputs[-1] == Watermark(MAX_WATERMARK)


async def test_async_source_is_read_without_stalling_emission():
    async def source():
        yield 0
        await asyncio.sleep(0.2)  # a slow producer
        yield 1

    async def fn(record):
        return record

    op = AsyncWaitOperator(fn, mode="ordered", capacity=10)
    seen = []
    async for out in op.run(source()):
        seen.append((out, asyncio.get_running_loop().time()))
    assert [o.record for o, _ in seen[:2]] == [0, 1]
    assert seen[1][1] - seen[0][1] >= 0.15  # 0 was emitted before the producer woke


async def test_stopping_early_cancels_every_call_and_leaks_no_task():
    calls = ManualCalls()
    op = AsyncWaitOperator(calls, mode="ordered", capacity=5)
    async with contextlib.aclosing(op.run(range(100))) as outputs:
        task = asyncio.create_task(outputs.__anext__())
        await settle()
        calls.complete(0)
        await task
    assert sorted(calls.cancelled) == [1, 2, 3, 4]
    assert op.metrics.in_flight == 0
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_cancelling_the_consumer_cancels_in_flight_calls():
    calls = ManualCalls()
    op = AsyncWaitOperator(calls, mode="unordered", capacity=3)

    async def consume():
        async for _ in op.run(range(10)):
            pass

    consumer = asyncio.create_task(consume())
    await settle()
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer
    assert sorted(calls.cancelled) == [0, 1, 2]
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_a_failing_source_surfaces_after_cancelling_calls():
    calls = ManualCalls()

    def source():
        yield 0
        raise RuntimeError("input file broken at row 2")

    op = AsyncWaitOperator(calls, capacity=5)
    with pytest.raises(RuntimeError, match="row 2"):
        async for _ in op.run(source()):
            pass
    assert asyncio.all_tasks() == {asyncio.current_task()}  # the call for 0 is gone too


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "sorted"}, "mode"),
        ({"capacity": 0}, "capacity"),
        ({"timeout": 0}, "timeout"),
    ],
)
def test_bad_configuration_is_named(kwargs, message):
    async def fn(record):
        return record

    with pytest.raises(ValueError, match=message):
        AsyncWaitOperator(fn, **kwargs)


async def test_metrics_count():
    async def fn(record):
        await asyncio.sleep(0.01)
        return record

    op = AsyncWaitOperator(fn, capacity=10)
    async for _ in op.run(range(20)):
        pass
    stats = op.metrics.as_dict()
    assert stats["completed"] == 20 and stats["emitted"] == 20 and stats["in_flight"] == 0
