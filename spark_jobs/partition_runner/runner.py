"""The partition runner (Spark's side) and one attempt, which wires the parts together."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Sequence,
)
from contextlib import aclosing
from enum import Enum
from typing import Any

import pyarrow as pa
import uvloop

from spark_jobs.asyncwait import (
    MAX_WATERMARK,
    AsyncWaitOperator,
    Failure,
    OperatorOutput,
    OperatorSnapshot,
    Result,
    Watermark,
)
from spark_jobs.enrichers import default_retry_strategy
from spark_jobs.partition_runner.row_enrichment import RowEnrichment, open_row_enrichment
from spark_jobs.snapshots import LeaseError, Manifest, PartitionSnapshots
from spark_jobs.snapshots.batch_journal import BatchJournal
from spark_jobs.spec.job_spec import JobSpec
from spark_jobs.telemetry import partition_telemetry

from .budget import BudgetStop
from .committer import Cut, SnapshotCommitter
from .epoch import EpochBuffer
from .gc_pacing import paced_collections
from .input import (
    Element,
    IndexedRow,
    InputRows,
    indexed_rows,
    watermark_generator,
    with_watermarks,
)
from .outage import ApiOutageError, OutageDetector, retry_transient
from .oversized import bounded
from .paid import PaidAnswers
from .replay import pending_outcomes, replay
from .stats import RunStats
from .systemic import SystemicDetector, SystemicFailureError, credentials_hint
from .task import PartitionTask

logger = logging.getLogger(__name__)


class CutReason(Enum):
    """Why a snapshot is cut: one due while the attempt goes on, or its last one."""

    DUE = "due"
    """The interval or the epoch's size came round; calls go on."""
    END = "end"
    """The input ended and everything was emitted: the partition is done."""
    OUTAGE = "outage"
    """An outage was proven; the queued transient failures are called again on retry."""
    SYSTEMIC = "systemic"
    """A systemic failure stopped the partition; its queued failures are called again."""
    BUDGET = "budget"
    """The run's request budget is spent; the rest waits for the next run."""
    BATCHES = "batches"
    """Every record is answered or waits in a provider batch still running, from which
    the run detaches (``--detach-batches``): a later run reads their rows."""

    @property
    def last(self) -> bool:
        """The attempt's last cut: nothing follows it."""
        return self is not CutReason.DUE


class PartitionRunner:
    def __init__(
        self,
        spec: JobSpec,
        snapshots: PartitionSnapshots,
        schema: pa.Schema,
        holds_lease: Callable[[], bool] | None = None,
    ) -> None:
        """``holds_lease`` says whether this run still owns the namespace: asked before
        any work and before every commit, so a fenced-off run stops (see ``lease.py``)."""
        self.spec = spec
        self.snapshots = snapshots
        self.holds_lease = holds_lease
        self.schema = schema  # input columns + enrichment fields + _error + _attempts
        self.enrichment_fields = list(spec.response_fields)

    def run(
        self, batches: Iterable[pa.RecordBatch], task: PartitionTask
    ) -> Iterator[pa.RecordBatch]:
        """Spark's side (``mapInArrow``): a sync iterator of output batches, driven by an
        event loop of its own that runs only while Spark asks for the next batch."""
        loop = uvloop.new_event_loop()
        outputs = self.run_async(batches, task)
        with paced_collections(self.spec.gc_young_threshold):
            try:
                while True:
                    try:
                        yield loop.run_until_complete(outputs.__anext__())
                    except StopAsyncIteration:
                        return
            finally:
                loop.run_until_complete(outputs.aclose())
                loop.close()

    def check_lease(self) -> None:
        if self.holds_lease is not None and not self.holds_lease():
            raise LeaseError(
                f"partition {self.snapshots.partition}: fenced off: another run holds this "
                "namespace now; this attempt commits nothing"
            )

    async def run_async(
        self, batches: Iterable[pa.RecordBatch], task: PartitionTask
    ) -> AsyncGenerator[pa.RecordBatch, None]:
        await asyncio.to_thread(self.check_lease)
        manifest = await asyncio.to_thread(self.snapshots.latest)
        if manifest is not None and manifest.job_fingerprint != task.fingerprint:
            logger.warning(
                "partition %d: ignoring a snapshot of another job configuration", task.partition
            )
            manifest = None
        attempt = _Attempt(self, task, manifest)
        try:
            if manifest is not None:
                async for batch in attempt.replay(manifest):
                    yield batch
            async for batch in attempt.enrich(indexed_rows(batches)):
                yield batch
        finally:  # the partition's last export, when it ends and when it fails
            await asyncio.to_thread(attempt.telemetry.close)


class _Attempt:
    """One attempt at a partition, resumed from ``resumed`` when not None (its mutable
    state is kept off the runner, which is shared)."""

    def __init__(
        self, runner: PartitionRunner, task: PartitionTask, resumed: Manifest | None
    ) -> None:
        spec = runner.spec
        self.runner, self.task, self.resumed = runner, task, resumed
        self.watermark = resumed.watermark if resumed is not None else None
        self.stats = RunStats(resumed, task.run_id)
        self.telemetry = partition_telemetry(spec, task.partition, task.attempt, task.run_id)
        self.inputs = InputRows()
        self.outage = OutageDetector(spec.outage_threshold, task.partition)
        self.systemic = SystemicDetector(
            spec.systemic_threshold, task.partition, credentials_hint(spec.http)
        )
        self.budget = BudgetStop.of(spec, runner.snapshots, task)
        self.buffer = EpochBuffer(runner.schema, runner.enrichment_fields)
        self.committer = SnapshotCommitter.for_attempt(runner, task, resumed, self.telemetry)
        self.operator: AsyncWaitOperator | None = None
        # The idle cuts' (see _idle_cut): whether _batches awaits the next output, the
        # batches they flushed that Spark has not had yet, and a failure of one.
        self._awaiting = False
        self._unsent: deque[pa.RecordBatch] = deque()
        self._idle_failure: Exception | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.paid = PaidAnswers(spec)  # what a resume already paid for: its LRU to start
        namespace = runner.snapshots.path.rsplit("/", 1)[0]  # a model's batches, beside it
        self.journal = BatchJournal.at(spec.snapshot_dir, namespace, task.partition)

    async def replay(self, manifest: Manifest) -> AsyncIterator[pa.RecordBatch]:
        async for batch in replay(self.runner.snapshots, self.runner.schema, manifest):
            self.stats.replayed += batch.num_rows
            self.paid.replayed(batch)
            yield batch
        self.stats.replayed += pending_outcomes(manifest)
        self.telemetry.replayed(self.stats.replayed)
        logger.info(
            "partition %d: resuming epoch %d: %d records replayed, %d in flight, input offset %d",
            self.task.partition,
            manifest.epoch,
            self.stats.replayed,
            len(manifest.pending),
            manifest.input_offset,
        )

    async def enrich(self, rows: Iterator[IndexedRow]) -> AsyncIterator[pa.RecordBatch]:
        elements = with_watermarks(rows, watermark_generator(self.runner.spec))
        restored = OperatorSnapshot.empty()
        if self.resumed is not None:
            restored = OperatorSnapshot(list(self.resumed.pending), self.resumed.input_offset)
            self.inputs.skip(elements, restored)
            self.paid.restored(self.inputs, restored)
        try:
            async for batch in self._enrich(elements, restored):
                yield batch
        finally:
            await self.committer.settle()

    async def _enrich(
        self, elements: Iterator[Element], restored: OperatorSnapshot
    ) -> AsyncIterator[pa.RecordBatch]:
        spec, budget = self.runner.spec, self.budget.allowance
        await asyncio.to_thread(self.committer.begin)
        opened = open_row_enrichment(
            spec, self.task.partition, budget, self.paid.answered, self.telemetry, self.journal
        )
        async with opened as enrichment:
            self._watch(enrichment)

            def call(index: int) -> Awaitable[dict[str, Any]]:
                # Returns enrichment's coroutine rather than awaiting it in one of its
                # own: a frame less for every resume of every call.
                return enrichment.call(self.inputs[index])

            self.operator = AsyncWaitOperator(
                self.budget.guard(bounded(call, spec.operator_capacity)),
                mode=spec.mode,
                capacity=spec.operator_capacity,
                call_capacity=spec.operator_call_capacity,
                timeout=spec.timeout,
                retry=default_retry_strategy(spec.max_attempts),
            )
            stream = self.operator.run(
                self.inputs.admit(elements, lambda: self.budget.spent, enrichment.input_ended),
                restored=restored,
            )
            try:
                async with (
                    aclosing(stream) as outputs,  # closing cancels calls in flight
                    aclosing(self._batches(outputs)) as batches,
                ):
                    async for batch in batches:
                        yield batch
            except ApiOutageError:
                # Keep everything done so far; the retry resumes from this cut.
                await self._final_cut(CutReason.OUTAGE)
                raise
            except SystemicFailureError as stop:
                # Not raised on to Spark, whose task retries would only repeat the calls:
                # the partition ends with its cut, and the driver fails the run naming why.
                logger.error("%s", stop)
                await self._final_cut(CutReason.SYSTEMIC)
                return
            if self.budget.spent or self.budget.batches_running:
                # Not a failure: what is done is committed, the rest waits for the next run.
                await self._stop_for_next_run()
                return
            self._emit(self.outage.release())  # the input ended; no outage proven
            self._emit(self.systemic.release())  # nor a systemic failure
            if self.buffer.rows:
                yield self.buffer.flush()
            await self._final_cut(CutReason.END)

    async def _stop_for_next_run(self) -> None:
        """The last cut of an attempt whose budget is spent, or whose records wait in
        provider batches still running: the held records go into it, to be called (or
        their batches read) again."""
        held = len(self.budget.held) + len(self.outage) + len(self.systemic)
        if self.budget.spent:
            reason, why = CutReason.BUDGET, "the run's request budget is spent"
        else:
            reason, why = CutReason.BATCHES, "its provider batches are still running"
        logger.warning(
            "partition %d: %s; %d records stay queued for the next run",
            self.task.partition,
            why,
            held,
        )
        await self._final_cut(reason)

    def _watch(self, enrichment: RowEnrichment) -> None:
        """What each cut reads of the enrichment: its counters, its answers of the last
        minute by outcome, the response cache's new answers."""
        self.stats.counters, self.stats.recent_calls = enrichment.counters, enrichment.recent_calls
        self.committer.stored = enrichment.stored

    async def _batches(
        self, outputs: AsyncIterator[OperatorOutput]
    ) -> AsyncGenerator[pa.RecordBatch, None]:
        """Output batches for Spark, cutting a snapshot whenever one is due: after an
        output, or on the timer while none comes (:meth:`_idle_cut`)."""
        tick = self.committer.policy.interval / 2
        self._timer = asyncio.get_running_loop().call_later(tick, self._idle_cut, tick)
        try:
            while True:
                self._awaiting = True  # the one await an idle cut may be taken in
                try:
                    output = await anext(outputs)
                except StopAsyncIteration:
                    break
                finally:
                    self._awaiting = False
                if self._idle_failure is not None:
                    raise self._idle_failure
                while self._unsent:  # flushed by an idle cut: before this output's rows
                    yield self._unsent.popleft()
                if isinstance(output, Watermark):
                    if output.timestamp != MAX_WATERMARK:
                        self.watermark = output.timestamp
                    continue
                if not self.budget.hold(output):
                    for passed in self.outage.take(output):
                        self._emit(self.systemic.take(passed))
                    if self.systemic.stop is not None:
                        raise SystemicFailureError(self.systemic.stop)
                if self.buffer.batch_full:
                    yield self.buffer.flush()
                if self.committer.due(self.buffer.epoch.rows):
                    if self.buffer.rows:
                        yield self.buffer.flush()
                    self._cut(CutReason.DUE)
        finally:
            if self._timer is not None:
                self._timer.cancel()
        if self._idle_failure is not None:
            raise self._idle_failure
        while self._unsent:
            yield self._unsent.popleft()

    def _idle_cut(self, tick: float) -> None:
        """On the timer: cut when one is due although no output came, so that the
        snapshot's stats (what the calls are getting: ``recent_calls``) reach the
        driver when nothing finishes, as when every call is throttled.

        Only while :meth:`_batches` awaits the operator's next output: the operator is
        then suspended in its wait with nothing taken from its queue (it hands an output
        over in the step that takes it), and the runner is between two outputs: the one
        instant every cut is taken at. The buffer's rows go into the cut's epoch and to
        Spark as the next batch, as a due cut sends them. A failure here fails the task
        at its next output (the cut may have taken the epoch), and no cut follows it.
        """
        if not self._awaiting or not self.committer.due(self.buffer.epoch.rows):
            self._timer = asyncio.get_running_loop().call_later(tick, self._idle_cut, tick)
            return
        try:
            if self.buffer.rows:
                self._unsent.append(self.buffer.flush())
            self._cut(CutReason.DUE)
        except Exception as failure:
            logger.error("partition %d: idle cut failed: %s", self.task.partition, failure)
            self._idle_failure = failure
            return
        self._timer = asyncio.get_running_loop().call_later(tick, self._idle_cut, tick)

    def _emit(self, outputs: Sequence[Result | Failure]) -> None:
        for output in outputs:
            self.buffer.add(self.inputs.pop(output.record), output)

    async def _final_cut(self, reason: CutReason) -> None:
        """The last snapshot of this attempt, for any ``reason`` but ``DUE``."""
        if self.buffer.rows:
            self.buffer.flush()  # after a stop: the unsent tail goes to the snapshot only
        await self.committer.wait()  # raises if that write failed
        self._cut(reason)
        await self.committer.wait()
        if reason is CutReason.END:  # no call follows: what is left of its claims is the others'
            await asyncio.to_thread(self.budget.give_back)

    def _cut(self, reason: CutReason) -> None:
        """Take the consistent cut now; the committer writes it while calls continue.

        Held-back suspects and records that met the spent budget were emitted before
        everything still queued, so they come first, as records to call again. After an
        outage, so does every transient failure still queued (the API was down, the
        records are not bad); after a systemic stop, every queued failure of its kind.
        """
        assert self.operator is not None
        queued = self.operator.snapshot()
        entries = [
            *self.systemic.requeued(),
            *self.outage.requeued(),
            *self.budget.requeued(),
            *queued.entries,
        ]
        if reason is CutReason.OUTAGE:
            entries = retry_transient(entries)
        systemic = self.systemic.stop if reason is CutReason.SYSTEMIC else None
        if systemic:
            entries = self.systemic.retry_queued(entries)
        snapshot = OperatorSnapshot(entries, queued.consumed)
        stats = self.stats.at_cut(
            final=reason is CutReason.END,
            budget_exhausted=reason is CutReason.BUDGET,
            batches_running=reason is CutReason.BATCHES,
            in_flight=len(entries),
            systemic_failure=systemic,
        )
        epoch = self.buffer.take_epoch()
        self.committer.start(
            Cut(snapshot, epoch, stats, self.watermark, own=self.stats.own, last=reason.last)
        )
