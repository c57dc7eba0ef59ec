"""The Spark enrichment job on the driver, run by its entry ``spark_jobs/enrich_job.py``
(``spark-submit spark_jobs/enrich_job.py ...`` or ``python -m spark_jobs.enrich_job ...``).

Read the input, split it into a fixed number of partitions by key hash (sorted within
each, so a resumed partition sees the same rows in the same order on any cluster), enrich
every partition with :class:`PartitionRunner` through ``mapInArrow``, write the results
and dead letters with Spark's commit protocol, then ``_SUMMARY.json``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from spark_jobs.driver.dead_letter_retry import (
    DeadLetterRetry,
    original_fingerprint,
    retry_namespace,
)
from spark_jobs.driver.input_reader import read_input
from spark_jobs.driver.lineage_parent import with_lineage_parent
from spark_jobs.driver.model_estimate import estimate_run
from spark_jobs.driver.progress import (
    ProgressFolder,
    ProgressReporter,
    records_settled,
    settle_quiet_s,
)
from spark_jobs.driver.publish import ParquetRun, staging_for
from spark_jobs.driver.run_failures import (
    RunFailed,
    dead_letter_ceiling,
    fail_if,
    nothing_enriched,
    systemic_failure,
)
from spark_jobs.driver.spark_io import (
    OutputCounts,
    input_fingerprint,
    output_arrow_schema,
    partition_deterministically,
    partition_sizes,
    write_outputs,
)
from spark_jobs.driver.summary import build_summary
from spark_jobs.driver.table_publish import TableRun, stage
from spark_jobs.exit_status import ExitStatus
from spark_jobs.records.completion import CompletionRecord
from spark_jobs.records.job_record import JobRecord
from spark_jobs.records.summary import JobSummary
from spark_jobs.session.connect import is_connect, remote_url
from spark_jobs.session.executor_check import ExecutorCheck, ExecutorEnvironmentError
from spark_jobs.session.jvm import jit_options
from spark_jobs.session.spark_logging import apply_level, configure_launch
from spark_jobs.session.spark_session import cancel_running, check_java, spark_session
from spark_jobs.session.task_slots import spark_conf, with_running_partitions
from spark_jobs.snapshots import (
    Heartbeat,
    LeaseError,
    NamespaceKey,
    NamespaceLease,
    SnapshotStore,
)
from spark_jobs.snapshots.budget_ledger import discard_other_runs
from spark_jobs.snapshots.lease import this_process
from spark_jobs.snapshots.resume import Decision, ResumeRefusedError, decide
from spark_jobs.spec.input_options import reader_identity
from spark_jobs.spec.job_cli import parse_args
from spark_jobs.spec.job_spec import JobSpec
from spark_jobs.spec.secret_check import check_secrets, secret_variable_names
from spark_jobs.spec.spec_error import SpecError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

logger = logging.getLogger("enrich_job")


def main(argv: list[str] | None = None) -> ExitStatus:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        spec = parse_args(argv)
        check_secrets(spec)
        remote = remote_url(spec.remote, spec.ship_env)
        if remote is None:  # a Spark Connect client needs no Java
            check_java()
            jit_options()  # an unknown ENRICH_JVM_JIT stops the run before the JVM starts
    except SpecError as error:
        print(f"enrich_job: error: {error}", file=sys.stderr)
        return ExitStatus.BAD_OPTIONS
    configure_launch(spec.spark_log_level)
    hidden = [*secret_variable_names(spec), spec.cache_key_env]  # in the Spark UI
    spark = spark_session(spec.ship_env, remote, hidden)
    apply_level(spark, spec.spark_log_level)
    try:
        executors = ExecutorCheck(spark, spec)  # beside the run's first steps
        if spec.estimate:  # before any call, and instead of the run
            executors.wait()
            print(json.dumps(estimate_run(spark, spec), sort_keys=True))
            return ExitStatus.DONE
        summary = run(spark, spec, executors.wait)
    except (SpecError, ResumeRefusedError, ExecutorEnvironmentError) as error:
        print(f"enrich_job: error: {error}", file=sys.stderr)
        return ExitStatus.CANNOT_RUN
    except LeaseError as error:
        print(f"enrich_job: error: {error}", file=sys.stderr)
        return ExitStatus.LEASE_HELD
    except RunFailed as failure:  # systemic failure, dead-letter ceiling: see run_failures
        if failure.summary is not None:
            print(json.dumps(failure.summary.to_json(), sort_keys=True))
        print(f"enrich_job: error: {failure.reason}", file=sys.stderr)
        return failure.exit_status
    finally:
        spark.stop()
    print(json.dumps(summary.to_json(), sort_keys=True))
    if summary.budget is not None:
        stop = summary.budget.describe(summary.records_in, "cost" if spec.max_cost else "request")
        if summary.budget.batches_running:
            print(f"enrich_job: {stop}; run again once they ended", file=sys.stderr)
            return ExitStatus.BATCHES_RUNNING
        print(f"enrich_job: {stop}; run again to resume", file=sys.stderr)
        return ExitStatus.BUDGET_SPENT
    return ExitStatus.DONE


def run(
    spark: SparkSession, spec: JobSpec, executors_ready: Callable[[], None] = lambda: None
) -> JobSummary:
    """The whole job on an existing session, holding the namespace's lease; returns the
    summary it also publishes. ``executors_ready`` returns once the executors can run the
    job, or raises: waited for after the input is read and sized, before anything is
    written to the namespace or any call made."""
    run_id = spec.run_id or uuid.uuid4().hex[:12]
    spec = with_lineage_parent(spec, spark_conf(spark))  # the Airflow task that runs this
    store = SnapshotStore(spec.snapshot_dir)
    key = NamespaceKey(spec.dag_id, spec.task_id, spec.interval_start)
    if spec.retry_dead_letters:  # its own namespace: never the original run's snapshots
        key = retry_namespace(key)
    # A classic session's driver ends the run when it dies; a Connect client's tasks go on.
    holder = None if is_connect(spark) else this_process()
    lease = store.lease(key, run_id, spec.lease_ttl, holder)
    # The input is read while the lease just written settles (0.5 s once idle), again
    # should another run win the race for it; a dead-letter retry reads its base holding it.
    read: tuple[DataFrame, float] | None = None
    if spec.retry_dead_letters:
        lease.acquire(spec.lease_wait)
    else:
        read = lease.acquire(spec.lease_wait, meanwhile=partial(_read, spark, spec))
    try:
        with Heartbeat(lease, on_lost=partial(cancel_running, spark)) as heartbeat:
            try:
                return _run_holding_lease(
                    spark, spec, store, key, lease, run_id, executors_ready, read
                )
            except Exception:
                if heartbeat.lost:
                    raise LeaseError(_FENCED) from None
                raise
    finally:
        lease.release()


_FENCED = (
    "fenced off: another run took over this namespace (this run's lease expired or was "
    "discarded); nothing of this run was published"
)


def _run_holding_lease(
    spark: SparkSession,
    spec: JobSpec,
    store: SnapshotStore,
    key: NamespaceKey,
    lease: NamespaceLease,
    run_id: str,
    executors_ready: Callable[[], None],
    read: tuple[DataFrame, float] | None,
) -> JobSummary:
    retry, frame, started = _rows(spark, spec, read)
    partitioned, sizes = partition_deterministically(frame, spec), partition_sizes(frame, spec)
    records_in = sum(sizes.values())
    job_record = _job_record(frame, spec, records_in)
    executors_ready()
    decision = _open_namespace(store, key, spec, job_record)
    if decision.completed is not None:
        return _published(decision.completed)
    spec = with_running_partitions(spec, spark_conf(spark))
    discard_other_runs(spec.snapshot_dir, store.namespace_path(key), run_id)
    enriched = _enriched(partitioned, spec, key, job_record.fingerprint, sizes, run_id)
    output = _run_output(spec, store, key, run_id)
    folder = _progress_folder(store, key, spec, run_id, records_in, lease)
    try:
        settle = partial(records_settled, folder, settle_quiet_s(spec.snapshot_interval))
        with ProgressReporter(folder, sizes, spec.progress_interval, settle=settle) as progress:
            counts = write_outputs(enriched, spec, output.data, output.dead_letters)
        if isinstance(output, TableRun):
            output.task_rows = counts.task_rows
        record = progress.final()
        fail_if(store, key, job_record, run_id, systemic_failure(record.partitions, run_id))
        summary = build_summary(
            store,
            key,
            spec,
            progress=record,
            records_in=records_in,
            counts=counts,
            resumed=decision.resume,
            duration_s=time.monotonic() - started,
            run_id=run_id,
        )
        if retry is not None and isinstance(output, ParquetRun):  # tables refuse retries
            retry.merge_into(spark, output.staging)
            summary = retry.summary(summary)
        fail_if(store, key, job_record, run_id, _ceiling(spec, output, summary, counts))
        summary = output.publish(summary, lease.holds)
    finally:
        output.discard()
    logger.info("summary: %s", json.dumps(summary.to_json(), sort_keys=True))
    if summary.budget is None:  # else the snapshots are what the next run resumes
        completion = CompletionRecord(job_record.fingerprint, run_id, summary)
        _close_namespace(store, key, spec, completion)
        if retry is not None:
            _close_retry(store, key, retry, completion)
    return summary


def _rows(
    spark: SparkSession, spec: JobSpec, read: tuple[DataFrame, float] | None
) -> tuple[DeadLetterRetry | None, DataFrame, float]:
    """The rows to enrich and when their reading started: the input ``read`` while the
    lease settled, or (None) a dead-letter retry's, read holding the lease."""
    if read is not None:
        return None, *read
    started = time.monotonic()
    retry = DeadLetterRetry.open(spark, spec)
    return retry, retry.frame, started


def _read(spark: SparkSession, spec: JobSpec) -> tuple[DataFrame, float]:
    """The input, and when its reading started (the run's duration counts from there)."""
    started = time.monotonic()
    return read_input(spark, spec), started


def _published(completed: CompletionRecord) -> JobSummary:
    """The summary of a job already published: the completion record's."""
    if completed.summary is None:
        raise ValueError("completion record: summary is missing")
    return completed.summary


def _close_retry(
    store: SnapshotStore, key: NamespaceKey, retry: DeadLetterRetry, completion: CompletionRecord
) -> None:
    """The original namespace of a dead-letter retry is complete with the merged result,
    under the fingerprint of the run whose dead letters were retried."""
    retry.close(store, key, replace(completion, fingerprint=original_fingerprint(store, key)))


def _progress_folder(
    store: SnapshotStore,
    key: NamespaceKey,
    spec: JobSpec,
    run_id: str,
    records_in: int,
    lease: NamespaceLease,
) -> ProgressFolder:
    """The writer of the progress record: the job's size, and the intervals by which a
    reader tells a silent run (``snapshots/progress.py``)."""
    intervals = (spec.snapshot_interval, spec.progress_interval)
    return ProgressFolder(store, key, run_id, spec.partitions, records_in, lease.holds, intervals)


def _run_output(
    spec: JobSpec, store: SnapshotStore, key: NamespaceKey, run_id: str
) -> ParquetRun | TableRun:
    """Where this run's Spark write goes and how it is published (``--output-format``)."""
    if spec.output_format == "parquet":
        return ParquetRun(spec.output, staging_for(spec.output, run_id))
    return TableRun(spec, store, key, stage(spec, run_id))


def _ceiling(
    spec: JobSpec, output: ParquetRun | TableRun, summary: JobSummary, counts: OutputCounts
) -> RunFailed | None:
    """A crossed dead-letter ceiling, or with none given a run that enriched nothing; its
    result is set aside beside the output."""
    if spec.max_dead_letters is None:
        retryable = isinstance(output, ParquetRun)  # tables refuse --retry-dead-letters
        failure = nothing_enriched(summary, counts.first_error, retryable=retryable)
    else:
        failure = dead_letter_ceiling(summary, spec.max_dead_letters)
    if failure is not None and failure.summary is not None:
        output.set_aside(failure.summary)
    return failure


def _job_record(frame: DataFrame, spec: JobSpec, records_in: int) -> JobRecord:
    """What this run is: its inputs' and enrichment's fingerprint, and its size."""
    inputs, enrichment = input_fingerprint(frame), spec.enrichment_identity()
    reader = reader_identity(spec.input_format, spec.input_options)
    retried = spec.retry_dead_letters or None  # the rows chosen are part of the input
    record = JobRecord("", inputs, enrichment, reader, retried, records_in)
    return replace(record, fingerprint=_digest(record.identity()))


def _open_namespace(
    store: SnapshotStore, key: NamespaceKey, spec: JobSpec, job_record: JobRecord
) -> Decision:
    """Resume, start fresh (discarding old snapshots) or find the job done; says which."""
    decision = decide(store, key, job_record, spec.resume, job_record.records_in)
    logger.info("%s (%s)", decision.message, store.namespace_path(key))
    if decision.completed is None:
        if not decision.resume:
            store.discard_snapshots(key, keep_batches=decision.keep_batches)
        store.write_job_record(key, job_record)
    return decision


def _close_namespace(
    store: SnapshotStore, key: NamespaceKey, spec: JobSpec, completion: CompletionRecord
) -> None:
    """After a published success: keep the history (``--keep-snapshots``) or leave only
    the completion record, which makes the same job run again a no-op."""
    if spec.keep_snapshots:
        # Every writer is done: delete what no valid manifest references (files of
        # attempts that died before committing, corrupt ones), keeping the history.
        store.clean_unreferenced(key, keep_manifests=sys.maxsize, grace=timedelta(0))
    else:
        store.mark_completed(key, completion)


def _enriched(
    partitioned: DataFrame,
    spec: JobSpec,
    key: NamespaceKey,
    fingerprint: str,
    sizes: dict[int, int],
    run_id: str,
) -> DataFrame:
    """The partitions as the executors enrich them, each by its PartitionRunner (lazy:
    the output's write runs it)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = output_arrow_schema(partitioned.schema, spec)
    enrich = _partition_function(spec, key, fingerprint, sizes, schema, run_id)
    return partitioned.mapInArrow(enrich, from_arrow_schema(schema))


def _partition_function(
    spec: JobSpec,
    key: NamespaceKey,
    fingerprint: str,
    sizes: dict[int, int],
    schema: pa.Schema,
    run_id: str,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function Spark ships to executors: one PartitionRunner per task."""
    spec_json = spec.to_json()

    def enrich_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        from spark_jobs.partition_runner import PartitionRunner, PartitionTask

        context = TaskContext.get()
        if context is None:  # Spark sets it in every task; only a direct call lacks one
            raise RuntimeError("enrich_partition runs inside a Spark task (mapInArrow)")
        partition = context.partitionId()
        attempt = f"s{context.stageId()}-t{context.taskAttemptId()}-a{context.attemptNumber()}"
        task_spec = JobSpec.from_json(spec_json)
        store = SnapshotStore(task_spec.snapshot_dir)
        lease = store.lease(key, run_id)
        runner = PartitionRunner(task_spec, store.partition(key, partition), schema, lease.holds)
        task = PartitionTask(partition, attempt, sizes.get(partition, 0), fingerprint, run_id)
        yield from runner.run(batches, task)

    return enrich_partition


def _digest(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
