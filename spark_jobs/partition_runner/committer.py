"""The snapshot committer: writes each cut as one format-2 commit (``snapshots/writer.py``).

A cut is taken on the event loop at one instant (between two outputs) and written in a
worker thread while calls stay in flight. One write at a time: a cut waits for the last
one, and a failed write fails the task rather than losing data. Each cut also rewrites
the attempt's own record of what it paid (``snapshots/attempt_counts.py``): calls made so
far, those in flight or retrying included, so a kill loses at most one interval's calls;
and it writes the response cache's answers taken at the cut, so a kill loses none of them.

An ordinary cut costs three storage requests: that record (a PUT), the lease check (a GET)
and the commit with the cut's rows inline (a PUT); the cache's answers add a PUT when
there are any. The lease is checked right before the commit, as format 1 checked it right
before its manifest, so fencing is as strong as it was; the record goes before the check
(a fenced-off run records the calls it did make).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from spark_jobs.asyncwait import OperatorSnapshot
from spark_jobs.partition_runner.response_cache import Answers, ResponseCache
from spark_jobs.snapshots import AttemptRecorder, Manifest, PartitionSnapshots
from spark_jobs.spec.job_spec import JobSpec
from spark_jobs.telemetry import NO_TELEMETRY, PartitionTelemetry

from .epoch import ERROR_COLUMN, Epoch
from .task import PartitionTask

logger = logging.getLogger(__name__)


class PartitionRunnerParts(Protocol):
    """What the committer takes from the partition runner (``runner.py``)."""

    snapshots: PartitionSnapshots
    schema: pa.Schema
    spec: JobSpec

    def check_lease(self) -> None: ...


@dataclass(frozen=True)
class CutPolicy:
    """When a cut is due: every ``interval`` seconds, or once ``max_rows`` outputs wait."""

    interval: float
    max_rows: int


@dataclass(frozen=True)
class Cut:
    """What one snapshot commits: queued entries and offset, outputs, counters, watermark;
    ``own`` is this attempt's counters alone, ``last`` when no call follows the cut."""

    snapshot: OperatorSnapshot
    epoch: Epoch
    stats: dict[str, Any]
    watermark: int | None
    own: Mapping[str, int] = field(default_factory=dict)
    last: bool = False


class SnapshotCommitter:
    """Commits the cuts of one partition attempt, continuing from ``resumed``.

    ``check_lease`` runs before every manifest commit (a fenced-off run raises there);
    ``recorder`` keeps the attempt's own record (see :meth:`begin`); ``stored``, once the
    enrichment is open, is the response cache whose new answers each cut takes and writes.
    """

    def __init__(
        self,
        snapshots: PartitionSnapshots,
        schema: pa.Schema,
        task: PartitionTask,
        resumed: Manifest | None,
        policy: CutPolicy,
        check_lease: Callable[[], None],
        recorder: AttemptRecorder,
    ) -> None:
        self.snapshots, self.schema, self.task = snapshots, schema, task
        self.recorder = recorder
        self.policy = policy
        self.check_lease = check_lease
        self.last_committed = resumed
        self.writer = snapshots.writer(task.attempt)
        self._write_task: asyncio.Future[Manifest] | None = None
        self._last_cut = time.monotonic()
        self.stored: ResponseCache | None = None
        self.telemetry: PartitionTelemetry = NO_TELEMETRY

    @classmethod
    def for_attempt(
        cls,
        runner: PartitionRunnerParts,
        task: PartitionTask,
        resumed: Manifest | None,
        telemetry: PartitionTelemetry,
    ) -> SnapshotCommitter:
        """The committer of one attempt: the spec's cut policy, the attempt's own record."""
        snapshots, spec = runner.snapshots, runner.spec
        policy = CutPolicy(spec.snapshot_interval, spec.snapshot_max_rows)
        recorder = snapshots.attempt_ledger().recorder(task.partition, task.attempt, task.run_id)
        committer = cls(
            snapshots, runner.schema, task, resumed, policy, runner.check_lease, recorder
        )
        committer.telemetry = telemetry
        return committer

    def begin(self) -> None:
        """Record the attempt before its first call (blocking): one that dies before its
        first cut is then known to have been cut short, its figures lower bounds."""
        self.check_lease()
        self.recorder.write({}, final=False)

    def due(self, epoch_rows: int) -> bool:
        if self._write_task is not None and not self._write_task.done():
            return False  # one write at a time; the next output tries again
        elapsed = time.monotonic() - self._last_cut
        return elapsed >= self.policy.interval or epoch_rows >= self.policy.max_rows

    def start(self, cut: Cut) -> None:
        """Write ``cut`` in a thread; the earlier write must be over (its failure raises)."""
        if self._write_task is not None:
            self._write_task.result()  # a failed write fails the task rather than losing data
        self._last_cut = time.monotonic()
        answers = self.stored.take() if self.stored is not None else {}  # at the cut's instant
        self._write_task = asyncio.ensure_future(asyncio.to_thread(self._write, cut, answers))

    async def wait(self) -> None:
        """Wait for the write in flight, if any; raises if it failed."""
        if self._write_task is not None:
            await self._write_task
        self._write_task = None

    async def settle(self) -> None:
        """On the way out: a started write finishes, never torn (its error is not ours)."""
        if self._write_task is not None and not self._write_task.done():
            await asyncio.wait([self._write_task])

    def _write(self, cut: Cut, answers: Answers) -> Manifest:
        """The attempt's record, then the commit (in a worker thread: blocking storage
        I/O). The record goes first: what a kill loses is then the calls since the cut was
        taken, not those during a slow commit too. The cache's answers go last, even when
        the commit fails: they are paid for whatever happens to it."""
        try:
            return self._commit(cut)
        finally:
            if self.stored is not None:
                self.stored.keep(answers)

    def _commit(self, cut: Cut) -> Manifest:
        task = self.task
        self.recorder.write(cut.own, final=cut.last)
        new = [
            (kind, pa.Table.from_batches(batches, self.schema))
            for kind, batches in (
                ("results", cut.epoch.results),
                ("dead_letters", cut.epoch.dead_letters),
            )
        ]
        started = time.monotonic()
        committed = self.writer.commit(self._next_manifest(cut), new, self.check_lease)
        epoch, seconds = cut.epoch, time.monotonic() - started
        errors = [batch.column(ERROR_COLUMN) for batch in epoch.dead_letters]
        enriched = sum(batch.num_rows for batch in epoch.results)
        self.telemetry.committed(enriched, errors, seconds, self.writer.last_commit_bytes)
        self.last_committed = committed
        logger.info(
            "partition %d: committed epoch %d: %d of %s records, %d in flight",
            task.partition,
            committed.epoch,
            committed.committed_rows + committed.dead_letter_rows,
            task.records_total if task.records_total is not None else "?",
            len(cut.snapshot.entries),
        )
        return committed

    def _next_manifest(self, cut: Cut) -> Manifest:
        """The next epoch with the segments already committed (the writer adds the cut's)."""
        task, snapshot, previous = self.task, cut.snapshot, self.last_committed
        if previous is None:
            return Manifest(
                job_fingerprint=task.fingerprint,
                partition=task.partition,
                epoch=0,
                input_offset=snapshot.consumed,
                attempt=task.attempt,
                pending=snapshot.entries,
                watermark=cut.watermark,
                records_total=task.records_total,
                stats=cut.stats,
            )
        return previous.advance(
            attempt=task.attempt,
            input_offset=snapshot.consumed,
            pending=snapshot.entries,
            watermark=cut.watermark,
            records_total=task.records_total,
            stats=cut.stats,
        )
