"""What the API returns about a namespace, built from the snapshot store.

One function per part of a :class:`~plugins.web.models.NamespaceView`; the page renders
the same views, so the HTML and the JSON never disagree.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

from plugins.web.models import (
    CostView,
    LinksView,
    NamespaceView,
    PartitionView,
    TotalsView,
)
from spark_jobs.asyncwait import MIN_WATERMARK
from spark_jobs.snapshots import NamespaceInfo, NamespaceKey, PartitionProgress, SnapshotStore
from spark_jobs.snapshots.resume import NamespaceProgress
from spark_jobs.summary import cost_report, job_watermark

logger = logging.getLogger(__name__)

#: The most partitions a job record may declare (the DAG's own maximum).
MAX_PARTITIONS = 4_096


def _utc(ms: int | None) -> str | None:
    if ms is None:
        return None
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return None


def partition_view(p: PartitionProgress) -> PartitionView:
    return PartitionView(
        **{**asdict(p), "committed_at": p.committed_at.isoformat(), "stats": dict(p.stats)},
        done_rows=p.done_rows,
        watermark_utc=_utc(p.watermark),
        finished=bool(p.stats.get("finished")),
    )


def partition_count(store: SnapshotStore, key: NamespaceKey, parts: list[PartitionProgress]) -> int:
    """The job's partition count (from its job record), at least what was reported."""
    record = store.read_job_record(key) or {}
    enrichment = record.get("enrichment")
    declared = enrichment.get("partitions") if isinstance(enrichment, dict) else None
    if not isinstance(declared, int) or isinstance(declared, bool):
        declared = 0
    if not 0 <= declared <= MAX_PARTITIONS:  # the valve's cost grows with its square
        logger.warning("ignoring a job record of %s declaring %r partitions", key, declared)
        declared = 0
    return max(declared, max((p.partition + 1 for p in parts), default=0))


def _corrupt_partitions(store: SnapshotStore, key: NamespaceKey, valid: set[int]) -> list[int]:
    """Partitions with manifest files but not one valid manifest (the next run of such a
    partition starts it over)."""
    return [
        number
        for number in store.partitions(key)
        if number not in valid and store.partition(key, number).has_manifest_files()
    ]


def _links(base: str, key: NamespaceKey) -> LinksView:
    path = "/".join(quote(part, safe="") for part in (key.dag_id, key.task_id, key.interval_start))
    query = urlencode(
        {"dag_id": key.dag_id, "task_id": key.task_id, "interval_start": key.interval_start},
        quote_via=quote,
    )
    return LinksView(
        detail=f"{base}/api/namespaces/{path}",
        discard=f"{base}/api/namespaces/{path}/discard",
        page=f"{base}/?{query}",
    )


def _totals(store: SnapshotStore, key: NamespaceKey, parts: list[PartitionProgress]) -> TotalsView:
    count = partition_count(store, key, parts)
    reported = {p.partition for p in parts}
    totals_known = len(reported) == count and all(p.records_total is not None for p in parts)
    if totals_known and parts:
        records_total: int | None = sum(p.records_total or 0 for p in parts)
    else:  # the driver counted the input before the first partition reported
        counted = (store.read_job_record(key) or {}).get("records_in")
        records_total = counted if isinstance(counted, int) and parts else None
    progress = NamespaceProgress(tuple(parts))
    watermark = job_watermark(parts, count) if count else None
    if watermark == MIN_WATERMARK:
        watermark = None  # a running partition has not emitted a watermark yet
    last_commit = max((p.committed_at for p in parts), default=None)
    return TotalsView(
        partition_count=count,
        partitions_reported=len(reported),
        partitions_finished=sum(1 for p in parts if p.stats.get("finished")),
        records_total=records_total,
        done_rows=progress.done,
        committed_rows=sum(p.committed_rows for p in parts),
        dead_letter_rows=sum(p.dead_letter_rows for p in parts),
        in_flight=progress.in_flight,
        epoch=progress.epoch,
        watermark=watermark,
        watermark_utc=_utc(watermark),
        last_committed_at=last_commit.isoformat() if last_commit else None,
        summary=progress.describe(records_total),
        cost=CostView(**cost_report(parts, None)),
    )


def _spaced(text: str) -> str:
    """Thousands separated by spaces, as the job's own progress lines write them."""
    return text.replace(",", " ")


def _completed_totals(summary: dict[str, Any]) -> TotalsView:
    """Totals of a run that published its output, from the summary it left behind."""

    def number(name: str) -> int:
        value = summary.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    partitions, records = number("partitions"), number("records_in")
    enriched, dead = number("enriched"), number("dead_letters")
    watermark = summary.get("watermark") if isinstance(summary.get("watermark"), int) else None
    recorded = summary.get("cost")
    cost: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
    return TotalsView(
        partition_count=partitions,
        partitions_reported=partitions,
        partitions_finished=partitions,
        records_total=records,
        done_rows=enriched + dead,
        committed_rows=enriched,
        dead_letter_rows=dead,
        in_flight=0,
        epoch=0,
        watermark=watermark,
        watermark_utc=_utc(watermark),
        last_committed_at=None,
        summary=_spaced(
            f"completed: {enriched + dead:,} of {records:,} records ({dead:,} dead letters)"
        ),
        cost=CostView(**{name: int(cost.get(name, 0)) for name in CostView.model_fields}),
    )


def namespace_view(store: SnapshotStore, info: NamespaceInfo, base: str) -> NamespaceView:
    """The namespace's progress; ``base`` is the path the app is mounted at (for links).
    Once the run published, its snapshots are gone and its completion record speaks."""
    parts = sorted(info.partitions, key=lambda p: p.partition)
    completed = None if parts else store.read_completed(info.key)
    summary = completed.get("summary") if completed else None
    return NamespaceView(
        dag_id=info.key.dag_id,
        task_id=info.key.task_id,
        interval_start=info.key.interval_start,
        totals=(
            _completed_totals(summary)
            if isinstance(summary, dict)
            else _totals(store, info.key, parts)
        ),
        completed=isinstance(summary, dict),
        corrupt_partitions=_corrupt_partitions(store, info.key, {p.partition for p in parts}),
        # A run holds a live lease while it works (lease.py): without one, a partition
        # that is neither finished nor stopped by its budget was interrupted.
        running=store.lease(info.key, owner="").live(),
        partitions=[partition_view(p) for p in parts],
        links=_links(base, info.key),
    )


def read_namespace(store: SnapshotStore, key: NamespaceKey, base: str) -> NamespaceView:
    return namespace_view(store, NamespaceInfo(key, tuple(store.namespace_progress(key))), base)
