"""Runs that must not end green: a systemic failure, a dead-letter ceiling crossed, and
a run that enriched nothing.

Each fails the job with its own exit status, publishes nothing to the output and keeps the
snapshot namespace, so the next run (after the cause is fixed, or with
``--retry-dead-letters``) resumes and pays for nothing twice. The reason is also written
into the namespace's job record (``last_failure``), where the Airflow operator reads it
to fail its task saying why and what a retry will do.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from spark_jobs.exit_status import ExitStatus
from spark_jobs.records.job_record import JobRecord
from spark_jobs.records.last_failure import LastFailure
from spark_jobs.records.summary import JobSummary
from spark_jobs.snapshots import NamespaceKey, SnapshotStore
from spark_jobs.snapshots.contracts import PartitionStats
from spark_jobs.spec.failure_options import dead_letter_limit

logger = logging.getLogger("enrich_job")


class RunFailed(Exception):
    """The run failed as a whole; ``exit_status`` says how, ``retry`` what clearing the
    Airflow task will do, ``summary`` is its counts (None when none could be built)."""

    def __init__(
        self,
        exit_status: ExitStatus,
        reason: str,
        retry: str,
        summary: JobSummary | None = None,
    ):
        super().__init__(reason)
        self.exit_status = exit_status
        self.reason = reason
        self.retry = retry
        self.summary = summary

    def record(self, run_id: str) -> LastFailure:
        """The ``last_failure`` entry of the job record."""
        return LastFailure(run_id, self.reason, self.retry, int(self.exit_status))


def systemic_failure(partitions: Sequence[Any], run_id: str) -> RunFailed | None:
    """The failure of this run when some partition stopped as a systemic failure."""
    stats = (PartitionStats.from_json(p.stats) for p in partitions)
    reasons = sorted(reason for s in stats if (reason := s.systemic_failure) and s.run_id == run_id)
    if not reasons:
        return None
    return RunFailed(
        ExitStatus.SYSTEMIC_FAILURE,
        f"{reasons[0]} ({len(reasons)} partition(s) stopped). Nothing was published and no "
        "dead letter was written; the snapshots are kept: fix the cause and run again, "
        "the run resumes and calls those records again.",
        "fix the cause (for an account-level failure the account's credit, billing limit, "
        "key or model; for 401/403 the connection's key or token), then clear this task: "
        "it resumes from the snapshots and calls those records again",
    )


def dead_letter_ceiling(summary: JobSummary, ceiling: str | int | None) -> RunFailed | None:
    """The failure of a finished run whose dead letters crossed ``ceiling``; ``summary``
    is kept in the failure with the reason."""
    if ceiling is None:
        return None
    limit = dead_letter_limit(ceiling, summary.records_in)
    if summary.dead_letters <= limit:
        return None
    reason = (
        f"dead-letter ceiling crossed: {summary.dead_letters} dead letters of "
        f"{summary.records_in} records, more than --max-dead-letters {ceiling} "
        f"({limit}). Nothing was published; the snapshots are kept: a rerun replays "
        "the result without calling the API again."
    )
    retry = (
        "clearing this task replays the same result without calls, and fails again unless "
        "max_dead_letters is raised; read the errors in the snapshots' dead letters first"
    )
    failed = replace(summary, failed=reason)
    return RunFailed(ExitStatus.DEAD_LETTER_CEILING, reason, retry, failed)


def nothing_enriched(
    summary: JobSummary, first_error: str | None, *, retryable: bool
) -> RunFailed | None:
    """The failure of a finished run whose every record is a dead letter, when no
    ``--max-dead-letters`` says how many are acceptable.

    The partitions hold back a streak of transient or same-kind failures only until it
    proves an outage or a systemic failure (``--outage-threshold``, ``--systemic-threshold``
    records in a row); at the end of a partition's input a shorter streak is released as
    dead letters. A partition smaller than those thresholds never proves either, so an API
    down for the whole run, or a wrong URL, left every record a dead letter and the run
    green. One enriched record anywhere shows the API answers; none, and the run failed.
    It fails as a ceiling does (its result set aside, the snapshots kept). ``retryable``:
    the output is Parquet, whose dead letters ``--retry-dead-letters`` calls again (a
    table's run is started again with ``--resume never``)."""
    if summary.budget is not None or summary.enriched or not summary.dead_letters:
        return None
    example = f" (one: {first_error[:300]})" if first_error else ""
    again = "--retry-dead-letters" if retryable else "--resume never"
    reason = (
        f"nothing enriched: all {summary.dead_letters} records are dead letters{example}. "
        "Nothing was published; the snapshots are kept: fix the cause, then run again with "
        f"{again} to call those records again (--max-dead-letters 100% accepts such a run)."
    )
    param = "the retry_dead_letters param" if retryable else "the resume param set to never"
    retry = (
        "clearing this task replays the same result without calls and fails again: fix the "
        f"cause, then run with {param} to call those records again"
    )
    failed = replace(summary, failed=reason)
    return RunFailed(ExitStatus.DEAD_LETTER_CEILING, reason, retry, failed)


def fail_if(
    store: SnapshotStore,
    key: NamespaceKey,
    job_record: JobRecord,
    run_id: str,
    failure: RunFailed | None,
) -> None:
    """Raise ``failure`` (when there is one) after logging it and writing it into the
    namespace's job record, for the Airflow operator. The caller publishes nothing and
    leaves the namespace as it is: resumable."""
    if failure is None:
        return
    if failure.summary is not None:
        logger.error("summary: %s", json.dumps(failure.summary.to_json(), sort_keys=True))
    logger.error("run failed: %s", failure.reason)
    store.write_job_record(key, job_record.failed(failure.record(run_id)))
    raise failure
