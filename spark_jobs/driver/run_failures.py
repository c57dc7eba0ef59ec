"""Runs that must not end green: a systemic failure and a dead-letter ceiling crossed.

Both fail the job with their own exit status, publish nothing to the output and keep the
snapshot namespace, so the next run (after the cause is fixed, or with
``--retry-dead-letters``) resumes and pays for nothing twice. The reason is also written
into the namespace's job record (``last_failure``), where the Airflow operator reads it
to fail its task saying why and what a retry will do.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from typing import Any, Protocol

from spark_jobs.exit_status import ExitStatus
from spark_jobs.snapshots import NamespaceKey, SnapshotStore
from spark_jobs.snapshots.contracts import JobSummary, PartitionStats
from spark_jobs.spec.option_values import check, parse_error_classes
from spark_jobs.spec.spec_error import SpecError

logger = logging.getLogger("enrich_job")

_CEILING = re.compile(r"^(?P<number>\d+(?:\.\d+)?)(?P<percent>%?)$")


class _FailureOptions(Protocol):
    @property
    def systemic_threshold(self) -> int: ...
    @property
    def max_dead_letters(self) -> str | int | None: ...
    @property
    def retry_dead_letters(self) -> str | None: ...


class RunFailed(Exception):
    """The run failed as a whole; ``exit_status`` says how, ``retry`` what clearing the
    Airflow task will do, ``summary`` is its counts (None when none could be built)."""

    def __init__(
        self,
        exit_status: ExitStatus,
        reason: str,
        retry: str,
        summary: dict[str, Any] | None = None,
    ):
        super().__init__(reason)
        self.exit_status = exit_status
        self.reason = reason
        self.retry = retry
        self.summary = summary

    def record(self, run_id: str) -> dict[str, Any]:
        """The ``last_failure`` entry of the job record."""
        return {
            "run_id": run_id,
            "exit_status": int(self.exit_status),
            "reason": self.reason,
            "retry": self.retry,
        }


def check_failure_options(spec: _FailureOptions) -> None:
    """Validate ``systemic_threshold`` and ``max_dead_letters`` (raises SpecError)."""
    threshold = spec.systemic_threshold
    check(
        isinstance(threshold, int) and not isinstance(threshold, bool) and threshold >= 0,
        "systemic_threshold",
        f"must be an integer >= 0, got {threshold!r}",
    )
    if spec.max_dead_letters is not None:
        dead_letter_limit(spec.max_dead_letters, 1)
    if spec.retry_dead_letters is not None:
        parse_error_classes(spec.retry_dead_letters)


def dead_letter_limit(ceiling: str | int, records_in: int) -> int:
    """The most dead letters allowed: ``N``, or ``P%`` of ``records_in`` (rounded down)."""
    match = _CEILING.match(str(ceiling).strip())
    if match is None or (match["percent"] and float(match["number"]) > 100):
        raise SpecError(
            f"--max-dead-letters: expected a count N or a share P% (0-100%), got {ceiling!r}"
        )
    if not match["percent"]:
        check("." not in match["number"], "max_dead_letters", f"a count is whole, got {ceiling!r}")
        return int(match["number"])
    return int(records_in * float(match["number"]) / 100)


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
        "fix the cause (for 401/403 the connection's key or token), then clear this task: "
        "it resumes from the snapshots and calls those records again",
    )


def dead_letter_ceiling(summary: dict[str, Any], ceiling: str | int | None) -> RunFailed | None:
    """The failure of a finished run whose dead letters crossed ``ceiling``; ``summary``
    is the stored form (:class:`JobSummary`'s), kept in the failure with the reason."""
    if ceiling is None:
        return None
    counts = JobSummary.from_json(summary)
    limit = dead_letter_limit(ceiling, counts.records_in)
    if counts.dead_letters <= limit:
        return None
    reason = (
        f"dead-letter ceiling crossed: {counts.dead_letters} dead letters of "
        f"{counts.records_in} records, more than --max-dead-letters {ceiling} "
        f"({limit}). Nothing was published; the snapshots are kept: a rerun replays "
        "the result without calling the API again."
    )
    retry = (
        "clearing this task replays the same result without calls, and fails again unless "
        "max_dead_letters is raised; read the errors in the snapshots' dead letters first"
    )
    return RunFailed(ExitStatus.DEAD_LETTER_CEILING, reason, retry, {**summary, "failed": reason})


def fail_if(
    store: SnapshotStore,
    key: NamespaceKey,
    job_record: dict[str, Any],
    run_id: str,
    failure: RunFailed | None,
) -> None:
    """Raise ``failure`` (when there is one) after logging it and writing it into the
    namespace's job record, for the Airflow operator. The caller publishes nothing and
    leaves the namespace as it is: resumable."""
    if failure is None:
        return
    if failure.summary is not None:
        logger.error("summary: %s", json.dumps(failure.summary, sort_keys=True))
    logger.error("run failed: %s", failure.reason)
    store.write_job_record(key, {**job_record, "last_failure": failure.record(run_id)})
    raise failure
