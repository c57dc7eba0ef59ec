"""Response models of the JSON API: the one description of what it returns.

FastAPI validates every response against them and publishes them in the app's
``/openapi.json``; the HTML page renders the same objects, so page and API never disagree.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class PartitionView(BaseModel):
    """One partition of the job: its latest valid commit as the namespace's progress record
    has it, or none yet (``pending``: every commit field is null) or no valid one
    (``corrupt``)."""

    partition: int
    state: str = Field(
        description='"finished", "budget spent", "batches running" (its records wait in '
        'provider batches), "running", "stalled" (the run holding the '
        'lease went silent), "interrupted" (no run holds it), "pending" (no commit yet) or '
        '"corrupt" (manifest files, none valid).'
    )
    state_note: str = Field(
        description='The state in full, e.g. "interrupted: last commit 3 min ago; …" or '
        '"no progress for 45 s: …" (the page\'s tooltip).'
    )
    epoch: int | None = Field(description="Snapshot epoch of the manifest (one per cut).")
    input_offset: int | None = Field(description="Input rows of the partition consumed at the cut.")
    records_total: int | None = Field(description="Rows of the partition, once known.")
    committed_rows: int = Field(description="Enriched rows committed to snapshots.")
    dead_letter_rows: int
    done_rows: int = Field(description="committed_rows + dead_letter_rows.")
    in_flight: int = Field(description="Requests pending at the cut: asked again on resume.")
    watermark: int | None = Field(description="Event-time watermark, epoch milliseconds.")
    watermark_utc: str | None
    committed_at: str | None = Field(description="When the manifest was committed (ISO 8601, UTC).")
    attempt: str | None = Field(description="The run attempt that committed it.")
    finished: bool
    stats: dict[str, Any] = Field(description="Counters the partition runner recorded.")


class CostView(BaseModel):
    """What the run paid for and the calls it did not have to make."""

    requests_made: int
    response_cache_hits: int
    coalesced_calls: int
    calls_saved_by_resume: int


class BatchView(BaseModel):
    """A provider batch of a batch-mode run, as its partition last saw it."""

    partition: int
    batch_id: str
    status: str = Field(description='The provider\'s word: "in_progress", "completed", …')
    total: int
    done: int = Field(description="Requests answered.")
    failed: int = Field(description="Requests errored, expired or cancelled.")
    seen_at: str | None = Field(description="When the partition read it (ISO 8601, UTC).")


class TotalsView(BaseModel):
    """The namespace's partitions added up."""

    partition_count: int = Field(description="Partitions of the job (its driver records it).")
    partitions_reported: int = Field(description="Partitions with a commit.")
    partitions_finished: int
    records_total: int | None = Field(description="Known once every partition reported it.")
    done_rows: int
    committed_rows: int
    dead_letter_rows: int
    in_flight: int
    epoch: int
    watermark: int | None = Field(description="Combined watermark of all partitions.")
    watermark_utc: str | None
    last_committed_at: str | None
    summary: str = Field(description='e.g. "epoch 12: 48 213 of 100 000 records committed …"')
    cost: CostView


class PartitionPageView(BaseModel):
    """Which partitions ``partitions`` holds: one page of every partition of the job."""

    offset: int = Field(description="Number of the first partition shown (partitions_offset).")
    limit: int = Field(description="Most partitions shown (partitions_limit).")
    total: int = Field(description="Partitions of the job, pending ones included.")


class StallView(BaseModel):
    """A running namespace whose run shows no sign of life (``snapshots/progress.py``)."""

    silent_s: int = Field(description="Seconds since the last commit or lease renewal.")
    text: str = Field(description='"no progress for 45 s", as the page and the Storage tab say.')
    note: str = Field(description="The longer explanation, with when the lease expires.")


class LinksView(BaseModel):
    detail: str
    discard: str
    page: str


class NamespaceView(BaseModel):
    """One task run's snapshots: (dag, task, data interval start)."""

    dag_id: str
    task_id: str
    interval_start: str
    totals: TotalsView
    corrupt_partitions: list[int] = Field(
        description="Partitions with manifest files but no valid manifest: started over."
    )
    running: bool = Field(description="A live run holds the namespace's lease.")
    stalled: StallView | None = Field(
        default=None,
        description="Set while the running run has sent neither a commit nor a lease renewal "
        "for over twice their intervals: it is probably dead, its lease not yet expired.",
    )
    completed: bool = Field(
        description="The run published its output: its snapshots gave way to a completion "
        "record, whose summary the totals show."
    )
    progress_note: str | None = Field(
        default=None,
        description="Why there is no partition progress: no progress record yet (the job's "
        "driver writes one every --progress-interval; runs of earlier versions have none), "
        "or an unreadable one.",
    )
    partitions: list[PartitionView]
    partitions_page: PartitionPageView
    batches: list[BatchView] = Field(
        default_factory=list,
        description="The provider batches of the partitions shown (batch mode), oldest first.",
    )
    links: LinksView

    @property
    def label(self) -> str:
        return f"{self.dag_id} / {self.task_id} / {self.interval_start}"


class DiscardResult(BaseModel):
    discarded: bool = Field(description="False when there was nothing to discard.")
