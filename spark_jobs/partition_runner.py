"""One partition: replay what is committed, enrich the rest, snapshot while running.

On start the runner takes the partition's best manifest, replays its segments, skips the
input to the manifest's offset (keeping the rows of the pending entries) and restores the
pending entries into the operator. While the operator runs, a snapshot is cut every
``snapshot_interval`` seconds (or when ``snapshot_max_rows`` outputs wait): the operator's
pending entries, its input offset and the outputs since the last epoch are taken at one
instant, between two outputs, and written in a worker thread while calls stay in flight.

Records given to the operator are row *indexes*, not rows: a manifest then holds only
small integers and enrichment values, never input data, and a restored index finds its
row again because the partition's input is deterministic (same rows, same order).

Memory is bounded by the operator's capacity (rows it holds), one input batch and the
segment buffer, whatever the partition size.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import aclosing
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import uvloop

from spark_jobs.asyncwait import (
    MAX_WATERMARK,
    AsyncWaitOperator,
    BoundedOutOfOrdernessGenerator,
    Failure,
    OperatorSnapshot,
    Result,
    Watermark,
)
from spark_jobs.enrichers import BudgetExhausted, default_retry_strategy
from spark_jobs.job_spec import JobSpec
from spark_jobs.row_enrichment import EVENT_MS, HELPER_COLUMNS, open_row_enrichment
from spark_jobs.snapshots import LeaseError, Manifest, PartitionSnapshots

logger = logging.getLogger(__name__)

ERROR_COLUMN = "_error"
ATTEMPTS_COLUMN = "_attempts"
OUTPUT_BATCH_ROWS = 2_000


class ApiOutageError(RuntimeError):
    """So many records in a row failed transiently that the API is down, not the records bad.

    The partition stops after a snapshot instead of dead-lettering through the outage;
    Spark's task retry (or Airflow's) resumes it, calling those records again.
    """


@dataclass
class PartitionTask:
    """What one Spark task knows about its partition."""

    partition: int
    attempt: str
    records_total: int | None
    fingerprint: str
    run_id: str = "run"
    """The spark-submit this attempt belongs to: the request budget is per run."""


@dataclass
class _Epoch:
    """Outputs emitted since the last committed snapshot, split by kind."""

    results: list[pa.RecordBatch] = field(default_factory=list)
    dead_letters: list[pa.RecordBatch] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(b.num_rows for b in (*self.results, *self.dead_letters))


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
    ) -> AsyncIterator[pa.RecordBatch]:
        state = _RunState(self, task)
        await asyncio.to_thread(self.check_lease)
        manifest = await asyncio.to_thread(self.snapshots.latest)
        if manifest is not None and manifest.job_fingerprint != task.fingerprint:
            logger.warning(
                "partition %d: ignoring a snapshot of another job configuration", task.partition
            )
            manifest = None
        if manifest is not None:
            async for batch in state.replay(manifest):
                yield batch
        rows = _rows(batches)
        async for batch in state.enrich(rows, manifest):
            yield batch


class _RunState:
    """The mutable state of one partition attempt (kept off the runner, which is shared)."""

    def __init__(self, runner: PartitionRunner, task: PartitionTask) -> None:
        self.runner = runner
        self.spec = runner.spec
        self.task = task
        self.manifest: Manifest | None = None  # the one this attempt resumed from
        self.last_committed: Manifest | None = None
        self.operator: AsyncWaitOperator | None = None
        self.counters: Callable[[], dict[str, int]] = dict
        self.epoch = _Epoch()
        self.pending_rows: list[dict[str, Any]] = []  # emitted, not yet in an output batch
        self.suspects: list[Failure] = []  # transient failures held back (see _take)
        self.over_budget: set[int] = set()  # records whose call met the spent budget
        self.held_over_budget: list[Failure] = []  # their outcomes, queued for the next run
        self.rows: dict[int, dict[str, Any]] = {}  # rows of records in the operator
        self.watermark: int | None = None
        self.replayed = 0
        self.commit: asyncio.Task[Manifest] | None = None
        self.last_cut = time.monotonic()
        self.rss_first_cut = 0.0  # worker memory, to show it stays flat
        self.rss_peak = 0.0

    # -- replay ----------------------------------------------------------------------

    async def replay(self, manifest: Manifest) -> AsyncIterator[pa.RecordBatch]:
        self.manifest = self.last_committed = manifest
        self.watermark = manifest.watermark
        for _kind, table in await asyncio.to_thread(
            lambda: list(self.runner.snapshots.read_segments(manifest))
        ):
            self.replayed += table.num_rows
            for batch in table.cast(self.runner.schema).to_batches():
                yield batch
        self.replayed += sum(1 for e in manifest.pending if "value" in e or "error" in e)
        logger.info(
            "partition %d: resuming epoch %d: %d records replayed, %d in flight, input offset %d",
            self.task.partition,
            manifest.epoch,
            self.replayed,
            len(manifest.pending),
            manifest.input_offset,
        )

    # -- enrichment --------------------------------------------------------------------

    async def enrich(
        self, rows: Iterator[tuple[int, dict[str, Any]]], manifest: Manifest | None
    ) -> AsyncIterator[pa.RecordBatch]:
        spec = self.spec
        elements = _with_watermarks(rows, spec)
        restored = OperatorSnapshot.empty()
        if manifest is not None:
            restored = OperatorSnapshot(list(manifest.pending), manifest.input_offset)
            self._skip(elements, restored)
        try:
            async for batch in self._enrich(elements, restored):
                yield batch
        finally:
            if self.commit is not None and not self.commit.done():
                await asyncio.wait([self.commit])  # a started write finishes, never torn

    async def _enrich(
        self, elements: Iterator[Any], restored: OperatorSnapshot
    ) -> AsyncIterator[pa.RecordBatch]:
        spec = self.spec
        budget = spec.request_budget(self.task.partition)
        if budget is not None:
            budget = max(0, budget - self._run_requests_before())
        async with open_row_enrichment(spec, self.task.partition, budget) as enrichment:
            self.counters = enrichment.counters

            async def call(index: int) -> dict[str, Any]:
                try:
                    return await enrichment.call(self.rows[index])
                except BudgetExhausted:
                    self.over_budget.add(index)
                    raise

            operator = AsyncWaitOperator(
                call,
                mode=spec.mode,
                capacity=spec.operator_capacity,
                timeout=spec.timeout,
                retry=default_retry_strategy(spec.max_attempts),
            )
            self.operator = operator
            stream = operator.run(self._admit(elements), restored=restored)
            try:
                async with aclosing(stream) as outputs:  # closing cancels calls in flight
                    async for output in outputs:
                        if isinstance(output, Watermark):
                            if output.timestamp != MAX_WATERMARK:
                                self.watermark = output.timestamp
                            continue
                        self._take(output)
                        if len(self.pending_rows) >= OUTPUT_BATCH_ROWS:
                            yield self._flush()
                        if self._cut_due():
                            if self.pending_rows:
                                yield self._flush()
                            self._cut(final=False)
            except ApiOutageError:
                # Keep everything done so far; the retry resumes from this cut.
                await self._final_cut(stop="outage")
                raise
            if self.over_budget:
                # Not a failure: what is done is committed, the rest waits for the next run.
                logger.warning(
                    "partition %d: the run's request budget is spent; %d records stay queued "
                    "for the next run",
                    self.task.partition,
                    len(self.held_over_budget) + len(self.suspects),
                )
                await self._final_cut(stop="budget")
                return
            self._release_suspects()  # the input ended; no outage proven
            if self.pending_rows:
                yield self._flush()
            await self._final_cut(stop=None)

    def _take(self, output: Result | Failure) -> None:
        """Queue an outcome for output, holding transient failures back as outage suspects.

        A streak of records failing transiently means the API is down, not that they are
        bad: they must not become dead letters. So they wait until a success breaks the
        streak (then they are dead letters after all) or the streak reaches
        ``outage_threshold`` (then the partition stops, and they are retried on resume).
        """
        if isinstance(output, Failure) and output.record in self.over_budget:
            self.held_over_budget.append(output)  # never called: queued for the next run
            return
        threshold = self.spec.outage_threshold
        if isinstance(output, Failure) and output.transient and threshold:
            self.suspects.append(output)
            if len(self.suspects) >= threshold:
                raise ApiOutageError(
                    f"partition {self.task.partition}: API unavailable: {len(self.suspects)} "
                    f"records in a row failed after retries, last: {output.error}"
                )
            return
        self._release_suspects()
        self.pending_rows.append(self._output_row(output))

    def _release_suspects(self) -> None:
        self.pending_rows.extend(self._output_row(s) for s in self.suspects)
        self.suspects = []

    async def _final_cut(self, *, stop: str | None) -> None:
        """The last snapshot of this attempt: the end of the partition (``stop`` None), an
        ``"outage"`` or a ``"budget"`` spent."""
        if self.pending_rows:
            self._flush()  # after a stop: the unsent tail goes to the snapshot only
        if self.commit is not None:
            await self.commit  # raises if that write failed
        self.commit = None
        self._cut(final=stop is None, outage=stop == "outage", budget_exhausted=stop == "budget")
        await self.commit

    def _run_requests_before(self) -> int:
        """Requests earlier attempts of this same run made (the budget is per run)."""
        manifest = self.manifest
        if manifest is None or manifest.stats.get("run_id") != self.task.run_id:
            return 0
        return int(manifest.stats.get("run_requests", 0))

    def _skip(self, elements: Iterator[Any], restored: OperatorSnapshot) -> None:
        """Advance the input to the snapshot's offset, keeping the rows still pending."""
        wanted = {e["record"] for e in restored.entries if "record" in e}
        for element in islice(elements, restored.consumed):
            if type(element) is tuple and element[0] in wanted:
                self.rows[element[0]] = element[1]

    def _admit(self, elements: Iterator[Any]) -> Iterator[Any]:
        """The operator's source: row indexes and watermarks; rows wait in ``self.rows``.

        Once the request budget is spent it ends early: the operator then drains the calls
        already sent, and the input offset marks where the next run goes on.
        """
        for element in elements:
            if self.over_budget:
                return
            if type(element) is tuple:
                self.rows[element[0]] = element[1]
                yield element[0]
            else:
                yield element

    def _output_row(self, output: Any) -> dict[str, Any]:
        row = self.rows.pop(output.record)
        for helper in HELPER_COLUMNS:
            row.pop(helper, None)
        if isinstance(output, Failure):
            row.update(dict.fromkeys(self.runner.enrichment_fields))
            row[ERROR_COLUMN] = output.error
        else:
            row.update(output.value)
            row[ERROR_COLUMN] = None
        row[ATTEMPTS_COLUMN] = output.attempts
        return row

    def _flush(self) -> pa.RecordBatch:
        batch = pa.RecordBatch.from_pylist(self.pending_rows, schema=self.runner.schema)
        self.pending_rows = []
        failed = batch.column(ERROR_COLUMN).is_valid()
        self.epoch.results.append(batch.filter(pc.invert(failed)))
        self.epoch.dead_letters.append(batch.filter(failed))
        return batch

    # -- snapshots ---------------------------------------------------------------------

    def _cut_due(self) -> bool:
        if self.commit is not None and not self.commit.done():
            return False  # one write at a time; the next output tries again
        elapsed = time.monotonic() - self.last_cut
        return (
            elapsed >= self.spec.snapshot_interval or self.epoch.rows >= self.spec.snapshot_max_rows
        )

    def _cut(self, *, final: bool, outage: bool = False, budget_exhausted: bool = False) -> None:
        """Take the consistent cut now; write it in a thread while calls continue.

        Held-back suspects and records that met the spent budget were emitted before
        everything still queued, so they come first, as records to call again. After an
        outage, so does every transient failure still queued: the API was down, the
        records are not bad.
        """
        if self.commit is not None:
            self.commit.result()  # a failed write fails the task rather than losing data
        assert self.operator is not None
        snapshot = self.operator.snapshot()
        entries = [
            *({"record": s.record, "attempts": 0} for s in self.suspects),
            # The call that met the budget was never sent: it does not count as an attempt.
            *({"record": h.record, "attempts": h.attempts - 1} for h in self.held_over_budget),
            *snapshot.entries,
        ]
        if outage:
            entries = [
                {"record": e["record"], "attempts": 0} if e.get("transient") else e for e in entries
            ]
        snapshot = OperatorSnapshot(entries, snapshot.consumed)
        epoch, self.epoch = self.epoch, _Epoch()
        self.last_cut = time.monotonic()
        rss_mb = _rss_mb()
        self.rss_first_cut = self.rss_first_cut or rss_mb
        self.rss_peak = max(self.rss_peak, rss_mb)
        counters = self.counters()
        stats = {
            "rss_mb_first_cut": self.rss_first_cut,
            "rss_mb_peak": self.rss_peak,
            **{name: self._base_stat(name) + n for name, n in counters.items()},
            "run_id": self.task.run_id,
            "run_requests": self._run_requests_before() + counters["requests_made"],
            "budget_exhausted": budget_exhausted,
            "replayed": self.replayed,
            "resumed": self.manifest is not None,
            "finished": final,
            "in_flight": len(snapshot.entries),
        }
        self.commit = asyncio.ensure_future(
            asyncio.to_thread(self._write, snapshot, epoch, stats, self.watermark)
        )

    def _base_stat(self, name: str) -> int:
        """Counters of earlier attempts, carried in the manifest this attempt resumed from."""
        if self.manifest is None:
            return 0
        return int(self.manifest.stats.get(name, 0))

    def _write(
        self,
        snapshot: OperatorSnapshot,
        epoch: _Epoch,
        stats: dict[str, Any],
        watermark: int | None,
    ) -> Manifest:
        """Segments first, then the manifest (in a worker thread: blocking storage I/O)."""
        store, task = self.runner.snapshots, self.task
        refs = [
            store.write_segment(
                pa.Table.from_batches(batches, self.runner.schema), kind=kind, attempt=task.attempt
            )
            for kind, batches in (("results", epoch.results), ("dead_letters", epoch.dead_letters))
            if sum(b.num_rows for b in batches)
        ]
        previous = self.last_committed
        if previous is None:
            manifest = Manifest(
                job_fingerprint=task.fingerprint,
                partition=task.partition,
                epoch=0,
                input_offset=snapshot.consumed,
                attempt=task.attempt,
                pending=snapshot.entries,
                segments=tuple(refs),
                watermark=watermark,
                records_total=task.records_total,
                stats=stats,
            )
        else:
            manifest = previous.advance(
                attempt=task.attempt,
                input_offset=snapshot.consumed,
                pending=snapshot.entries,
                new_segments=refs,
                watermark=watermark,
                records_total=task.records_total,
                stats=stats,
            )
        self.runner.check_lease()
        committed = store.commit(manifest)
        self.last_committed = committed
        logger.info(
            "partition %d: committed epoch %d: %d of %s records, %d in flight",
            task.partition,
            committed.epoch,
            committed.committed_rows + committed.dead_letter_rows,
            task.records_total if task.records_total is not None else "?",
            len(snapshot.entries),
        )
        return committed


def _rss_mb() -> float:
    """This Python worker's resident memory now, in MiB (Linux /proc)."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


def _rows(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(index, row) over the partition's input, one Arrow batch in memory at a time."""
    index = 0
    for batch in batches:
        for row in batch.to_pylist():
            yield index, row
            index += 1


def _with_watermarks(rows: Iterator[tuple[int, dict[str, Any]]], spec: JobSpec) -> Iterator[Any]:
    """Rows, and with an event-time column a watermark every ``watermark_every`` rows.

    Deterministic in the rows, so a resumed run rebuilds the same element sequence and
    the operator's offset means the same position in it.
    """
    if not spec.event_time_column:
        yield from rows
        return
    generator = BoundedOutOfOrdernessGenerator(
        int(spec.max_out_of_orderness * 1000), every=spec.watermark_every
    )
    for element in rows:
        # Read before yielding: once emitted, the row dict becomes the output row and
        # loses its helper columns, which would make the sequence depend on timing.
        event_ms = element[1].get(EVENT_MS)
        yield element
        if event_ms is not None:
            watermark = generator.on_event(event_ms)
            if watermark is not None:
                yield watermark
