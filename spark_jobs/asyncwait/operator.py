"""The async wait operator: Flink's ``AsyncWaitOperator`` on asyncio.

Up to ``capacity`` queue entries (records in flight or waiting to be emitted, and
watermarks) exist at once; the source is not read further until one is emitted
(back-pressure). Each record's call runs as its own task with its retries inside a single
per-record timeout. Outputs leave through the queue: in input order (``ordered``) or in
completion order within watermark boundaries (``unordered``). Every record yields exactly
one output, a :class:`Result` or a :class:`Failure`; the operator itself never fails
because a call did.

The run loop is the emitter: Flink hands results to a separate emitter thread, here the
consumer of ``run()`` pulls them, so emitting never races with snapshots.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable, Iterable
from typing import Any, Literal

from .element_queue import ElementQueue, new_queue
from .elements import MAX_WATERMARK, Failure, Result, Watermark, describe_error
from .metrics import OperatorMetrics
from .queue_entry import QueueEntry, RecordEntry, WatermarkEntry
from .record_timer import RecordTimer
from .retry import RetryStrategy
from .snapshot import OperatorSnapshot, decode_entry, encode_entry
from .source import NOTHING, Source

OperatorOutput = Result | Failure | Watermark
AsyncFunction = Callable[[Any], Awaitable[Any]]
TimeoutHandler = Callable[[Any], Any]


class AsyncWaitOperator:
    """Keeps many calls of ``fn`` in flight with Flink's ordering, capacity and timeout rules.

    ``timeout`` bounds one record's whole processing, retries included, except where ``fn``
    waits inside :func:`untimed` for capacity other records hold. On expiry
    ``on_timeout(record)`` (sync or async) may supply a fallback value; otherwise the record
    becomes a :class:`Failure`. A result arriving after its timeout is dropped.
    A :class:`Failure` is ``transient`` when its last error was one the retry strategy
    retries (the budget ran out) or the record timed out: the caller may tell an outage
    from bad records that way.

    ``call_capacity`` (None: ``capacity``) bounds the records whose call of ``fn`` is
    running: a new input element is taken only below it. For a function with its own
    concurrency limit (the HTTP enricher's slots) set it to that limit: records then start
    only when they can be sent, instead of parking inside ``fn``, while the queue keeps its
    room for records done out of turn or backing off (those hold no call).
    """

    def __init__(
        self,
        fn: AsyncFunction,
        *,
        mode: Literal["ordered", "unordered"] = "ordered",
        capacity: int = 100,
        timeout: float | None = None,
        retry: RetryStrategy | None = None,
        on_timeout: TimeoutHandler | None = None,
        call_capacity: int | None = None,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"fn must be an async function, got {fn!r}")
        if mode not in ("ordered", "unordered"):
            raise ValueError(f"mode must be 'ordered' or 'unordered', got {mode!r}")
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be a positive int, got {capacity!r}")
        if call_capacity is not None and (not isinstance(call_capacity, int) or call_capacity < 1):
            raise ValueError(
                f"call_capacity must be a positive int (or None), got {call_capacity!r}"
            )
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds (or None), got {timeout!r}")
        self.fn = fn
        self.mode = mode
        self.capacity = capacity
        self.call_capacity = call_capacity or capacity
        self.timeout = timeout
        self.retry = retry or RetryStrategy.no_retry()
        self.on_timeout = on_timeout
        self.metrics = OperatorMetrics()
        self._queue: ElementQueue = new_queue(mode, capacity)
        self._restoring: deque[QueueEntry] = deque()
        self._consumed = 0
        self._in_flight: dict[RecordEntry, asyncio.Task[None]] = {}
        self._calling = 0  # records whose call is starting or running (see call_capacity)
        self._waiter: asyncio.Future[None] | None = None
        self._crash: BaseException | None = None
        self._running = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def snapshot(self) -> OperatorSnapshot:
        """Everything not yet emitted, in queue order, and the source offset reached.

        Call it between two outputs of ``run()``; entries already emitted are never in it.
        """
        entries = [*self._queue.entries(), *self._restoring]
        return OperatorSnapshot([encode_entry(e) for e in entries], self._consumed)

    async def run(
        self,
        source: Iterable[Any] | AsyncIterable[Any],
        restored: OperatorSnapshot | None = None,
    ) -> AsyncGenerator[OperatorOutput, None]:
        """Process ``restored`` entries first, then ``source``; end with ``Watermark(MAX)``.

        ``source`` must start where the snapshot's ``consumed`` offset left off (the caller
        skips what was consumed); ``consumed`` keeps counting from there. Close the
        generator (``contextlib.aclosing``) or cancel its consumer to stop early: every
        call in flight is then cancelled and awaited.
        """
        if self._running:
            raise RuntimeError("this operator is already running; create one per stream")
        self._running = True
        restored = restored or OperatorSnapshot.empty()
        self.metrics = OperatorMetrics()
        self._queue = new_queue(self.mode, self.capacity)
        self._restoring = deque(decode_entry(e) for e in restored.entries)
        self._consumed = restored.consumed
        self._crash = None
        self._loop = asyncio.get_running_loop()
        source_reader = Source(source)
        queue, call_capacity = self._queue, self.call_capacity  # locals: used per element
        try:
            while True:
                if self._crash is not None:
                    raise self._crash
                entry = queue.pop_ready()
                if entry is not None:
                    yield self._emitted(entry)
                    continue
                if self._restoring and self._enqueue(self._restoring[0]):
                    self._restoring.popleft()
                    continue
                # The full queue is asked first: an element read cannot be given back.
                if not queue.full and self._calling < call_capacity and not source_reader.exhausted:
                    element = source_reader.take()
                    if element is not NOTHING:
                        self._consumed += 1
                        self._enqueue(
                            WatermarkEntry(element)
                            if type(element) is Watermark
                            else RecordEntry(element)
                        )
                        continue
                if source_reader.exhausted and not queue:
                    break
                await self._wait_for_progress(source_reader.pull)
            yield Watermark(MAX_WATERMARK)
        finally:
            await self._cancel_in_flight()
            await source_reader.close()
            self._running = False

    # -- queue -----------------------------------------------------------------------

    def _enqueue(self, entry: QueueEntry) -> bool:
        """Queue ``entry`` and start its call; False, and nothing done, if the queue is full."""
        if not self._queue.try_put(entry):
            return False
        if not entry.done:
            assert type(entry) is RecordEntry and self._loop is not None
            self._start_call(entry)  # counted now: the task runs only on the next turn
            self._in_flight[entry] = self._loop.create_task(self._process(entry))
            self.metrics.in_flight = len(self._in_flight)
        return True

    def _emitted(self, entry: QueueEntry) -> OperatorOutput:
        if type(entry) is RecordEntry:
            self.metrics.emitted += 1
        outcome = entry.outcome
        assert outcome is not None  # the queues let only complete entries out
        return outcome

    def _complete(self, entry: RecordEntry, outcome: Result | Failure) -> None:
        entry.complete(outcome)
        if type(outcome) is Failure:
            self.metrics.failed += 1
        else:
            self.metrics.completed += 1
        self._wake()

    # -- waking the run loop -----------------------------------------------------------

    def _wake(self, _: object = None) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _wait_for_progress(self, pull: asyncio.Task[Any] | None) -> None:
        """Sleep until a record completes or the source delivers an element."""
        self._waiter = asyncio.get_running_loop().create_future()
        if pull is not None:
            pull.add_done_callback(self._wake)
        try:
            await self._waiter
        finally:
            self._waiter = None
            if pull is not None:
                pull.remove_done_callback(self._wake)

    async def _cancel_in_flight(self) -> None:
        tasks = list(self._in_flight.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- one record --------------------------------------------------------------------

    async def _process(self, entry: RecordEntry) -> None:
        """One record's task; its bookkeeping lives here rather than in a done callback,
        which would cost an extra event-loop turn per record."""
        try:
            if self.timeout is None:
                outcome = await self._call_with_retries(entry)
            else:
                outcome = await self._call_within_timeout(entry, self.timeout)
            self._complete(entry, outcome)
        except asyncio.CancelledError:
            raise
        except BaseException as crash:  # a bug, not a call failure: surface it in run()
            if self._crash is None:
                self._crash = crash
            self._wake()
        finally:
            self._end_call(entry)  # cancelled or crashed mid-call
            del self._in_flight[entry]
            self.metrics.in_flight = len(self._in_flight)

    def _start_call(self, entry: RecordEntry) -> None:
        entry.calling = True
        self._calling += 1

    def _end_call(self, entry: RecordEntry) -> None:
        if entry.calling:
            entry.calling = False
            self._calling -= 1

    async def _call_within_timeout(self, entry: RecordEntry, seconds: float) -> Result | Failure:
        deadline = RecordTimer(seconds)  # fn may pause it while queueing (untimed)
        try:
            async with deadline:
                outcome = await self._call_with_retries(entry)
        except TimeoutError:
            if not deadline.expired():
                raise
        if not deadline.expired():
            return outcome
        self.metrics.timed_out += 1  # a call that swallowed its cancellation is dropped too
        if entry.calling:  # the call the timeout cut was made: it counts
            self._end_call(entry)
            entry.attempts += 1
        return await self._timeout_outcome(entry)

    async def _call_with_retries(self, entry: RecordEntry) -> Result | Failure:
        record, retry = entry.record, self.retry
        throttled_in_row = 0  # lengthens a throttled record's backoff; spends no attempt
        while True:
            try:
                value = await self.fn(record)
            except Exception as error:
                self._end_call(entry)
                spent = retry.spends_attempt(error)
                entry.attempts += spent
                throttled_in_row = 0 if spent else throttled_in_row + 1
                delay = retry.delay_after_exception(throttled_in_row or entry.attempts, error)
                if delay is None:
                    retrying = retry.max_attempts > 1  # no_retry: nothing is transient
                    transient = retrying and retry.retry_on_exception(error)
                    return Failure(record, describe_error(error), entry.attempts, transient)
            else:
                self._end_call(entry)
                entry.attempts += 1
                delay = retry.delay_after_result(entry.attempts, value)
                if delay is None:
                    return Result(record, value, entry.attempts)
            self.metrics.retried += 1
            self._wake()  # its call ended: the run loop may start another record
            await asyncio.sleep(delay)
            self._start_call(entry)

    async def _timeout_outcome(self, entry: RecordEntry) -> Result | Failure:
        if self.on_timeout is None:
            message = f"TimeoutError: no result within {self.timeout:g}s"
            return Failure(entry.record, message, entry.attempts, transient=True)
        try:
            value = self.on_timeout(entry.record)
            if inspect.isawaitable(value):
                value = await value
        except Exception as error:
            message = f"on_timeout failed: {describe_error(error)}"
            return Failure(entry.record, message, entry.attempts)
        return Result(entry.record, value, entry.attempts)
