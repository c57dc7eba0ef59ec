"""The job summary (``_SUMMARY.json``, the Airflow task's XCom, the Asset event's extra)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spark_jobs.driver.accounting import CallAccounting, account_calls
from spark_jobs.records.summary import BudgetStop, JobSummary
from spark_jobs.snapshots import NamespaceKey, SnapshotStore
from spark_jobs.snapshots.progress_record import PartitionEntry, ProgressRecord
from spark_jobs.spec.job_spec import JobSpec
from spark_jobs.spec.model_options import model_config, token_report


def cost_report(
    partitions: Sequence[PartitionEntry],
    cost_per_request: float | None,
    counted: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """What the run paid for and what it did not have to: calls made, and calls saved by
    the response cache, by sharing identical requests and by resuming from snapshots.
    ``counted`` holds the attempts' own call counters (``CallAccounting.totals``); without
    it (a live view) the progress record's are added up."""

    def total(name: str) -> int:
        if counted is not None and name in counted:
            return int(counted[name])
        return sum(int(getattr(p, name)) for p in partitions)

    saved = {
        "response_cache_hits": total("response_cache_hits"),
        "coalesced_calls": total("coalesced_calls") + total("cache_hits"),
        "calls_saved_by_resume": total("replayed"),
    }
    report: dict[str, Any] = {"requests_made": total("requests_made"), **saved}
    if cost_per_request is not None:
        report["cost_per_request"] = cost_per_request
        report["estimated_cost"] = round(report["requests_made"] * cost_per_request, 6)
        report["estimated_saving"] = round(sum(saved.values()) * cost_per_request, 6)
    return report


def build_summary(
    store: SnapshotStore,
    key: NamespaceKey,
    spec: JobSpec,
    *,
    progress: ProgressRecord,
    records_in: int,
    counts: dict[str, int],
    resumed: bool,
    duration_s: float,
    run_id: str = "run",
) -> JobSummary:
    """The summary from counts the job already has: the output's ``counts``, the driver's
    last ``progress`` record (its partitions' last commits) and the attempts' call
    counters (one listing of ``attempts/``)."""
    partitions = progress.partitions
    accounting = _accounting(store, key, partitions)
    stopped = [p for p in partitions if p.budget_exhausted and p.run_id == run_id]
    if stopped:  # the output is partial: count what the snapshots hold
        counts = {
            "enriched": sum(p.committed_rows for p in partitions),
            "dead_letters": sum(p.dead_letter_rows for p in partitions),
        }
    cost = cost_report(partitions, spec.cost_per_request, accounting.totals)
    model = model_config(spec)
    if model is not None:  # the spend ledger: tokens paid for, and their price
        cost.update(token_report(model, accounting.totals))
    done = counts["enriched"] + counts["dead_letters"]
    stops = tuple(sorted(p.partition for p in stopped))
    summary = JobSummary(
        run_id=run_id,
        records_in=records_in,
        enriched=counts["enriched"],
        dead_letters=counts["dead_letters"],
        replayed_from_snapshot=sum(p.replayed for p in partitions),
        requests_made=accounting.totals["requests_made"],
        accounting=accounting.to_json(),
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
        budget=BudgetStop(done, records_in - done, stops) if stopped else None,
    )
    if not stopped and records_in != done:
        raise RuntimeError(f"records_in != enriched + dead_letters in {summary.to_json()}")
    return summary


def _accounting(
    store: SnapshotStore, key: NamespaceKey, partitions: Sequence[PartitionEntry]
) -> CallAccounting:
    """Calls of every attempt, killed ones too (see ``accounting.py``)."""
    reading = store.attempt_counts(key)
    chains = {p.partition: p.stats for p in partitions}
    return account_calls(chains, reading.records, reading.unreadable)
