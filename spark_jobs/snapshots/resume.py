"""Deciding whether a run resumes, and saying so in one line a person can act on.

Shared by the Spark driver (which knows the job fingerprint) and the Airflow operator
(which reports what it found before submitting). The job record
(``spark_jobs/records/job_record.py``) holds the fingerprint's named parts (input files
with sizes and modification times, enrichment identity), so a mismatch can be explained
part by part rather than as two opaque hashes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from spark_jobs.records.completion import CompletionRecord
from spark_jobs.records.job_record import JobRecord

from .paths import NamespaceKey
from .progress import NamespaceInfo, ProgressRecordError
from .store import SnapshotStore

logger = logging.getLogger(__name__)


class ResumeRefusedError(RuntimeError):
    """``--resume require`` and there is nothing valid to resume from."""


@dataclass(frozen=True)
class Decision:
    resume: bool
    message: str
    completed: CompletionRecord | None = None
    """The completion record when this very job has already been published: nothing to do."""
    keep_batches: bool = False
    """A fresh start of the very job whose partitions committed nothing yet: the provider
    batches its attempts asked for (``batch_journal.py``, intents written before each
    create call) stay, and the partitions re-attach to them. A driver killed before its
    first commit would else pay every request of those batches twice."""


class ProgressSummary(Protocol):
    """What a resume decision or plan needs of a namespace's progress: its partitions
    with a commit, and the line that describes them."""

    @property
    def partitions(self) -> Sequence[object]: ...

    def describe(self, records_total: int | None) -> str: ...


def read_progress(store: SnapshotStore, key: NamespaceKey) -> NamespaceInfo:
    """Every partition's best manifest: one listing and a commit read per partition."""
    return NamespaceInfo(key, tuple(store.namespace_progress(key)))


def resume_progress(store: SnapshotStore, key: NamespaceKey) -> ProgressSummary:
    """The namespace's progress for deciding or planning a resume: its progress record,
    one read whatever the number of partitions, when it names any partition; otherwise
    (a run of an older version, a driver killed before its first refresh, a record that
    does not parse) the partitions themselves, so a commit is never overlooked."""
    try:
        record = store.progress_record(key)
    except ProgressRecordError as exc:
        logger.warning("progress record of %s unreadable (%s): reading the partitions", key, exc)
        record = None
    if record is not None and record.partitions:
        return record
    return read_progress(store, key)


def explain_changes(before: JobRecord, now: JobRecord) -> list[str]:
    """Human-readable differences between two job records."""
    changes = []
    old_inputs, new_inputs = before.inputs, now.inputs
    for path in sorted(set(old_inputs) | set(new_inputs)):
        if path not in new_inputs:
            changes.append(f"input file removed: {path}")
        elif path not in old_inputs:
            changes.append(f"input file added: {path}")
        elif old_inputs[path] != new_inputs[path]:
            changes.append(
                f"input file changed: {path} (size/mtime {old_inputs[path]} -> {new_inputs[path]})"
            )
    if before.reader != now.reader:
        changes.append(f"input reader changed: {before.reader} -> {now.reader}")
    old_conf, new_conf = before.enrichment, now.enrichment
    for name in sorted(set(old_conf) | set(new_conf)):
        if old_conf.get(name) != new_conf.get(name):
            changes.append(f"enrichment config changed: {name}")
    return changes or ["job fingerprint changed"]


def decide(
    store: SnapshotStore,
    key: NamespaceKey,
    job_record: JobRecord,
    mode: str,
    records_total: int | None,
) -> Decision:
    """Resume or start fresh, per ``mode`` (auto | never | require); the message says why.

    Raises :class:`ResumeRefusedError` for ``require`` when there is nothing to resume or
    the job changed.
    """
    if mode == "never":
        return Decision(False, "starting fresh: --resume never")
    completed = store.read_completed(key)
    if completed is not None and completed.fingerprint == job_record.fingerprint:
        return Decision(
            False,
            f"already complete: run {completed.run_id} published this job's output; "
            "nothing to do (--resume never runs it again)",
            completed,
        )
    progress = resume_progress(store, key)
    previous = store.read_job_record(key)
    if not progress.partitions:
        if mode == "require":
            raise ResumeRefusedError(
                f"--resume require: no snapshot found under {store.namespace_path(key)}"
            )
        same_job = previous is not None and previous.fingerprint == job_record.fingerprint
        message = "starting fresh: no snapshot for this run yet"
        return Decision(False, message, keep_batches=same_job)
    if previous is None or previous.fingerprint != job_record.fingerprint:
        changes = explain_changes(previous or JobRecord(), job_record)
        reason = "; ".join(changes)
        if mode == "require":
            raise ResumeRefusedError(
                f"--resume require: the job changed since the snapshot: {reason}"
            )
        return Decision(False, f"starting fresh: the job changed since the snapshot: {reason}")
    return Decision(True, f"resuming {progress.describe(records_total)}")
