"""The job summary (``_SUMMARY.json``, the Airflow task's XCom, the Asset event's extra)."""

from __future__ import annotations

from collections.abc import Sequence

from spark_jobs.driver.accounting import CallAccounting, account_calls
from spark_jobs.driver.spark_io import OutputCounts
from spark_jobs.records.cost import CostReport
from spark_jobs.records.summary import BATCHES_RUNNING, BUDGET_SPENT, BudgetStop, JobSummary
from spark_jobs.snapshots import NamespaceKey, SnapshotStore
from spark_jobs.snapshots.progress import PartitionEntry, ProgressRecord
from spark_jobs.spec.job_spec import JobSpec
from spark_jobs.spec.model_options import model_config, token_report


def build_summary(
    store: SnapshotStore,
    key: NamespaceKey,
    spec: JobSpec,
    *,
    progress: ProgressRecord,
    records_in: int,
    counts: OutputCounts,
    resumed: bool,
    duration_s: float,
    run_id: str = "run",
) -> JobSummary:
    """The summary from counts the job already has: the output's ``counts``, the driver's
    last ``progress`` record (its partitions' last commits) and the attempts' call
    counters (one listing of ``attempts/``)."""
    partitions = progress.partitions
    accounting = _accounting(store, key, partitions)
    stopped = [p for p in partitions if p.run_id == run_id and _stopped(p)]
    if stopped:  # the output is partial: count what the snapshots hold
        counts = OutputCounts(
            enriched=sum(p.committed_rows for p in partitions),
            dead_letters=sum(p.dead_letter_rows for p in partitions),
        )
    cost = CostReport.count(partitions, spec.cost_per_request, accounting.totals)
    model = model_config(spec)
    if model is not None:  # the spend ledger: tokens paid for, and their price
        cost = token_report(model, accounting.totals, cost)
    done = counts.enriched + counts.dead_letters
    stops = tuple(sorted(p.partition for p in stopped))
    summary = JobSummary(
        run_id=run_id,
        records_in=records_in,
        enriched=counts.enriched,
        dead_letters=counts.dead_letters,
        replayed_from_snapshot=sum(p.replayed for p in partitions),
        requests_made=cost.requests_made,
        accounting=accounting.record,
        resumed=resumed or any(p.resumed for p in partitions),
        epochs=sum(p.epoch + 1 for p in partitions),
        duration_s=round(duration_s, 3),
        watermark=progress.watermark(),
        partitions=spec.partitions,
        python_worker_peak_rss_mb=max((p.rss_mb_peak for p in partitions), default=0.0),
        output=spec.output,
        cost=cost,
        # the Airflow task's OpenLineage run (``lineage_parent.py``)
        lineage_parent=dict(spec.lineage_parent) if spec.lineage_parent else None,
        budget=BudgetStop(done, records_in - done, stops, _reason(stopped)) if stopped else None,
    )
    if not stopped and records_in != done:
        raise RuntimeError(f"records_in != enriched + dead_letters in {summary.to_json()}")
    return summary


def _stopped(partition: PartitionEntry) -> bool:
    """Whether the partition's last attempt stopped for a later run."""
    return partition.budget_exhausted or partition.batches_running


def _reason(stopped: Sequence[PartitionEntry]) -> str:
    """A spent budget when any partition met it (the next run must wait for more budget),
    else provider batches still running."""
    spent = any(p.budget_exhausted for p in stopped)
    return BUDGET_SPENT if spent else BATCHES_RUNNING


def _accounting(
    store: SnapshotStore, key: NamespaceKey, partitions: Sequence[PartitionEntry]
) -> CallAccounting:
    """Calls of every attempt, killed ones too (see ``accounting.py``)."""
    reading = store.attempt_counts(key)
    chains = {p.partition: p.stats for p in partitions}
    return account_calls(chains, reading.records, reading.unreadable)
