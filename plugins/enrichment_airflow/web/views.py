"""What the API returns about a namespace, built from its progress record.

One function per part of a :class:`~enrichment_airflow.web.models.NamespaceView`; the page renders
the same views, so the HTML and the JSON never disagree.

Progress comes from the namespace's ``progress.json``, which the job's driver keeps
current (``spark_jobs/snapshots/progress.py``); manifests are never scanned. A read
costs at most three GETs (the record, the completion record when there is no progress
record, and the lease) and one listing of the namespace's batches folder, plus, in a
batch-mode run, a listing and the progress files of each shown partition's provider
batches (``snapshots/batch_journal.py``). A namespace without a progress record (a run of an earlier
version, or a driver that has not written one yet) or with an unreadable one is shown
with a note saying so, and without partitions.
"""

from __future__ import annotations

import logging
import time
from urllib.parse import quote, urlencode

from enrichment_airflow.web.models import (
    BatchView,
    CostView,
    LinksView,
    NamespaceView,
    PartitionPageView,
    StallView,
    TotalsView,
)
from enrichment_airflow.web.partitions import partition_count, partition_page, utc
from spark_jobs.records.completion import CompletionRecord
from spark_jobs.records.cost import CostReport
from spark_jobs.records.summary import JobSummary
from spark_jobs.snapshots import NamespaceKey, SnapshotStore
from spark_jobs.snapshots.progress import ProgressRecord, ProgressRecordError, Stall, stall_of

logger = logging.getLogger(__name__)

#: Partitions one namespace shows at once, unless the request asks for another page size.
PARTITIONS_PAGE = 100
#: The largest page of partitions a request may ask for.
MAX_PARTITIONS_PAGE = 1_000
NO_RECORD = (
    "No progress record yet: the job's driver writes one when it starts and every "
    "--progress-interval (runs of earlier versions of this package leave none; the next "
    "run of this task writes it)."
)


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


def _totals(record: ProgressRecord) -> TotalsView:
    parts = record.partitions
    watermark = record.watermark()
    last_commit = max((p.committed_at_ms for p in parts), default=None)
    return TotalsView(
        partition_count=partition_count(record),
        partitions_reported=len(parts),
        partitions_finished=sum(1 for p in parts if p.finished),
        records_total=record.records_total,
        done_rows=record.done,
        committed_rows=sum(p.committed_rows for p in parts),
        dead_letter_rows=sum(p.dead_letter_rows for p in parts),
        in_flight=record.in_flight,
        epoch=record.epoch,
        watermark=watermark,
        watermark_utc=utc(watermark),
        last_committed_at=utc(last_commit),
        summary=record.describe(),
        cost=_cost_view(CostReport.count(parts, None)),
    )


def _completed_totals(summary: JobSummary) -> TotalsView:
    """Totals of a run that published its output, from the summary it left behind."""
    partitions = summary.partitions
    return TotalsView(
        partition_count=partitions,
        partitions_reported=partitions,
        partitions_finished=partitions,
        records_total=summary.records_in,
        done_rows=summary.records_done,
        committed_rows=summary.enriched,
        dead_letter_rows=summary.dead_letters,
        in_flight=0,
        epoch=0,
        watermark=summary.watermark,
        watermark_utc=utc(summary.watermark),
        last_committed_at=None,
        summary=summary.describe_completed(),
        cost=_cost_view(summary.cost),
    )


def _cost_view(cost: CostReport) -> CostView:
    return CostView(
        requests_made=cost.requests_made,
        response_cache_hits=cost.response_cache_hits,
        coalesced_calls=cost.coalesced_calls,
        calls_saved_by_resume=cost.calls_saved_by_resume,
    )


def _unknown_totals() -> TotalsView:
    """Totals of a namespace whose progress is not known (no readable progress record:
    ``progress_note`` says why)."""
    return TotalsView(
        partition_count=0,
        partitions_reported=0,
        partitions_finished=0,
        records_total=None,
        done_rows=0,
        committed_rows=0,
        dead_letter_rows=0,
        in_flight=0,
        epoch=0,
        watermark=None,
        watermark_utc=None,
        last_committed_at=None,
        summary="progress unknown: no readable progress record",
        cost=_cost_view(CostReport()),
    )


def _progress(store: SnapshotStore, key: NamespaceKey) -> tuple[ProgressRecord | None, str | None]:
    """The progress record, or None and why it cannot be shown."""
    try:
        record = store.progress_record(key)
    except ProgressRecordError as error:
        logger.warning("unreadable progress record of %s: %s", key, error)
        return None, (
            f"The progress record is unreadable ({error}); the job's driver rewrites it "
            "every --progress-interval while it runs."
        )
    return record, None if record is not None else NO_RECORD


def _completion(
    store: SnapshotStore, key: NamespaceKey
) -> tuple[CompletionRecord | None, JobSummary | None, str | None]:
    """The completion record and its summary, or None and why it cannot be shown (a
    crafted one, with counts that are not numbers, shows the namespace as corrupt, never
    a 500)."""
    try:
        record = store.completion_record(key)
        return record, record.summary if record is not None else None, None
    except ValueError as error:  # ManifestError: a field of the wrong type
        logger.warning("unreadable completion record of %s: %s", key, error)
        return None, None, f"The completion record is corrupt ({error}); discard the namespace."


def read_namespace(
    store: SnapshotStore,
    key: NamespaceKey,
    base: str,
    offset: int = 0,
    limit: int = PARTITIONS_PAGE,
) -> NamespaceView | None:
    """The namespace with partitions ``offset`` to ``offset + limit`` of the job; ``base``
    is the path the app is mounted at (for links). None when nothing is stored under it.
    Once the run published, its snapshots are gone and its completion record speaks."""
    record, note = _progress(store, key)
    completed, summary, unreadable = (
        _completion(store, key) if record is None else (None, None, None)
    )
    note = unreadable or note
    lease = store.lease(key, owner="").read()
    if record is None and completed is None and lease is None and unreadable is None:
        if not _stored(store, key):
            return None
    if summary is not None:
        totals, note = _completed_totals(summary), None
    else:
        totals = _totals(record) if record is not None else _unknown_totals()
    now = time.time()
    # A run holds a lease in force while it works (lease.py): without one (expired, or
    # its driver gone from this host), a partition that is neither finished nor stopped
    # by its budget was interrupted.
    running = lease is not None and lease.in_force(now)
    stall = stall_of(record, lease, now)
    if record is not None:
        partitions, page = partition_page(record, offset, limit, running, stall, now)
    else:
        partitions, page = [], PartitionPageView(offset=offset, limit=limit, total=0)
    return NamespaceView(
        dag_id=key.dag_id,
        task_id=key.task_id,
        interval_start=key.interval_start,
        totals=totals,
        completed=summary is not None,
        corrupt_partitions=list(record.corrupt_partitions) if record is not None else [],
        running=running,
        stalled=_stall_view(stall),
        progress_note=note,
        partitions=partitions,
        partitions_page=page,
        batches=_batch_views(store, key, [p.partition for p in partitions]),
        links=_links(base, key),
    )


def _batch_views(store: SnapshotStore, key: NamespaceKey, partitions: list[int]) -> list[BatchView]:
    """The provider batches of the partitions shown, each as its partition last saw it."""
    if not partitions:
        return []
    return [
        BatchView(
            partition=partition,
            batch_id=b.batch_id,
            status=b.status,
            total=b.total,
            done=b.done,
            failed=b.failed,
            seen_at=utc(round(b.seen_at * 1000)),
        )
        for partition, batches in store.batch_progress(key, partitions).items()
        for b in batches
    ]


def _stall_view(stall: Stall | None) -> StallView | None:
    if stall is None:
        return None
    return StallView(silent_s=int(stall.silent_s), text=stall.describe(), note=stall.explain())


def _stored(store: SnapshotStore, key: NamespaceKey) -> bool:
    """Whether anything else is stored under the namespace (partitions of a run without a
    progress record, or a job record): only asked of a namespace with none of the three."""
    return bool(store.partitions(key)) or store.read_job_record(key) is not None
