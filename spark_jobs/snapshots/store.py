"""The snapshot store: maps task runs and partitions onto any fsspec filesystem.

``storage_options`` (credentials, endpoints) go straight to fsspec and are never kept,
logged or written anywhere else: manifests, log lines and errors name only paths.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

from fsspec.core import url_to_fs

from spark_jobs.records.batch_intent import BatchProgress
from spark_jobs.records.completion import CompletionRecord
from spark_jobs.records.job_record import JobRecord

from .attempt_counts import AttemptLedger, LedgerReading
from .batch_journal import BATCHES_DIR, batch_progress
from .documents import ManifestError, read_document
from .lease import DEFAULT_TTL_S, LEASE_FILE, Holder, NamespaceLease
from .partition import DEFAULT_GRACE, PartitionSnapshots
from .paths import (
    MAX_PARTITIONS,
    PARTITION_DIR,
    NamespaceKey,
    basename,
    decode_component,
    partition_dir_name,
)
from .progress import MAX_RECORD_BYTES, PartitionProgress, ProgressRecord
from .storage import list_entries, write_atomically

logger = logging.getLogger(__name__)

#: The job description a run leaves in its namespace, so a later run can say what changed.
JOB_RECORD = "job.json"
#: What a successful run leaves behind instead of its snapshots: a rerun (a zombie try's
#: retry, a second submit) of the same job then knows the output is already published.
COMPLETED_RECORD = "completed.json"
#: The publish sequence a table output's commit carries, fixed before the first try
#: commits (``driver/table_publish.py``): every later try of the same publish reuses it.
TABLE_PUBLISH_RECORD = "table_publish.json"
#: The namespace's progress, kept current by the driver (see ``progress.py``).
PROGRESS_RECORD = "progress.json"


class SnapshotStore:
    """Root of all snapshots: ``<root>/<dag_id>/<task_id>/<interval_start>/part-NNNNN/``.

    ``root`` is a plain local path or a URL (``file://``, ``s3://``, ``hdfs://``...).
    Stateless apart from the filesystem handle, so one store can serve many threads.
    """

    def __init__(self, root: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self._fs, path = url_to_fs(root, **dict(storage_options or {}))
        self._root = path.rstrip("/")
        if not self._root:
            raise ValueError(f"snapshot root {root!r} must not be the filesystem root")

    def __repr__(self) -> str:
        return f"SnapshotStore({self._fs.unstrip_protocol(self._root)!r})"

    def namespace_path(self, key: NamespaceKey) -> str:
        """Filesystem path (without protocol) of a task run's directory."""
        return "/".join((self._root, *key.components()))

    def partition(self, key: NamespaceKey, partition: int) -> PartitionSnapshots:
        """Snapshot access for one partition; cheap, create one per task."""
        return PartitionSnapshots(
            self._fs, f"{self.namespace_path(key)}/{partition_dir_name(partition)}", partition
        )

    def batch_progress(
        self, key: NamespaceKey, partitions: Iterable[int]
    ) -> dict[int, list[BatchProgress]]:
        """The provider batches of ``partitions`` (batch mode), as each last saw them."""
        return batch_progress(self._fs, self.namespace_path(key), partitions)

    def partitions(self, key: NamespaceKey) -> list[int]:
        """Partition numbers that have a directory in the namespace, ascending; none at or
        beyond :data:`MAX_PARTITIONS` (no job has them: a crafted ``part-99999`` is ignored)."""
        numbers = []
        for entry in list_entries(self._fs, self.namespace_path(key)):
            match = PARTITION_DIR.fullmatch(basename(entry["name"]))
            if entry.get("type") == "directory" and match and int(match.group(1)) < MAX_PARTITIONS:
                numbers.append(int(match.group(1)))
        return sorted(numbers)

    def namespace_progress(self, key: NamespaceKey) -> list[PartitionProgress]:
        """Progress of every partition that has a valid manifest.

        Checks manifest checksums and segment presence/size but downloads no segment,
        so it stays cheap enough for dashboards; restore still verifies contents.
        """
        progress = []
        for number in self.partitions(key):
            manifest = self.partition(key, number).latest(verify_content=False)
            if manifest is not None:
                progress.append(PartitionProgress.of(manifest))
        return progress

    def write_progress_record(self, key: NamespaceKey, record: ProgressRecord) -> None:
        """Replace the namespace's progress record atomically (the driver does, every
        progress interval)."""
        write_atomically(self._fs, self.namespace_path(key), PROGRESS_RECORD, record.to_json())

    def progress_record(self, key: NamespaceKey) -> ProgressRecord | None:
        """The namespace's progress record, in one ranged GET; None when there is none (a
        run of an older version, or one whose driver has not written it yet). Raises
        ``ProgressRecordError`` when it is unreadable."""
        path = f"{self.namespace_path(key)}/{PROGRESS_RECORD}"
        try:
            data = self._fs.cat_file(path, start=0, end=MAX_RECORD_BYTES + 1)
        except FileNotFoundError:
            return None
        return ProgressRecord.from_json(data)

    def attempt_counts(self, key: NamespaceKey) -> LedgerReading:
        """Every attempt's own counters (see ``attempt_counts.py``): one listing."""
        return AttemptLedger(self._fs, self.namespace_path(key)).read()

    def namespace_keys(self) -> list[NamespaceKey]:
        """Every task run under the root, from directory names alone (no manifest read).

        Directories whose names this package could not have written are skipped.
        """
        return [
            NamespaceKey(dag_id, task_id, interval_start)
            for dag_id, dag_path in self._subdirs(self._root)
            for task_id, task_path in self._subdirs(dag_path)
            for interval_start, _ in self._subdirs(task_path)
        ]

    def write_job_record(self, key: NamespaceKey, record: JobRecord) -> None:
        """Store the run's description (fingerprint and its parts; no secrets) atomically."""
        data = json.dumps(record.to_json(), sort_keys=True, indent=1).encode()
        write_atomically(self._fs, self.namespace_path(key), JOB_RECORD, data)

    def read_job_record(self, key: NamespaceKey) -> JobRecord | None:
        """The description written by :meth:`write_job_record`, or None if absent/unreadable."""
        path = f"{self.namespace_path(key)}/{JOB_RECORD}"
        try:
            return JobRecord.from_json(read_document(self._fs, path, "job record"))
        except FileNotFoundError:
            return None
        except ValueError as error:  # ManifestError, or a field of the wrong type
            logger.warning("ignoring unreadable job record %s: %s", path, error)
            return None

    def write_table_publish(self, key: NamespaceKey, sequence: int) -> None:
        """Fix the publish sequence of the run the namespace holds (atomically)."""
        data = json.dumps({"sequence": sequence}).encode()
        write_atomically(self._fs, self.namespace_path(key), TABLE_PUBLISH_RECORD, data)

    def table_publish(self, key: NamespaceKey) -> int | None:
        """The sequence :meth:`write_table_publish` fixed, None before (or unreadable:
        the publisher then reads the table's log, which is what decides)."""
        path = f"{self.namespace_path(key)}/{TABLE_PUBLISH_RECORD}"
        try:
            record = read_document(self._fs, path, "table publish record")
        except (FileNotFoundError, ManifestError):
            return None
        sequence = record.get("sequence") if isinstance(record, dict) else None
        return sequence if isinstance(sequence, int) and sequence >= 1 else None

    def lease(
        self,
        key: NamespaceKey,
        owner: str,
        ttl_s: float = DEFAULT_TTL_S,
        holder: Holder | None = None,
    ) -> NamespaceLease:
        """The namespace's lease as seen by run ``owner``, written naming ``holder`` (see
        ``lease.py``)."""
        return NamespaceLease(self._fs, self.namespace_path(key), owner, ttl_s, holder=holder)

    def discard_snapshots(self, key: NamespaceKey, *, keep_batches: bool = False) -> None:
        """Delete the partitions, job record and completion record, keeping the lease:
        a run starting fresh clears what earlier runs left without giving up its lease.
        With ``keep_batches`` the provider batches' journal stays too (``batch_journal.py``):
        batches still running, which the fresh run re-attaches to rather than pay again."""
        path = self.namespace_path(key)
        kept = {LEASE_FILE, BATCHES_DIR} if keep_batches else {LEASE_FILE}
        for entry in list_entries(self._fs, path):
            if basename(entry["name"]) not in kept:
                self._fs.rm(entry["name"], recursive=True)
        self._fs.invalidate_cache(path)

    def mark_completed(self, key: NamespaceKey, record: CompletionRecord) -> None:
        """Replace the snapshots by a completion record (fingerprint, run, summary)."""
        self.discard_snapshots(key)
        data = json.dumps(record.to_json(), sort_keys=True, indent=1).encode()
        write_atomically(self._fs, self.namespace_path(key), COMPLETED_RECORD, data)

    def read_completed(self, key: NamespaceKey) -> CompletionRecord | None:
        """The record of :meth:`mark_completed`, or None (also when it is unreadable:
        logged, and the namespace counts as not completed)."""
        try:
            return self.completion_record(key)
        except ManifestError as error:
            logger.warning("ignoring an unreadable completion record of %s: %s", key, error)
            return None

    def completion_record(self, key: NamespaceKey) -> CompletionRecord | None:
        """The record of :meth:`mark_completed`, None when there is none; raises
        ManifestError when it is unreadable or a field is of the wrong type."""
        path = f"{self.namespace_path(key)}/{COMPLETED_RECORD}"
        try:
            document = read_document(self._fs, path, "completion record")
        except FileNotFoundError:
            return None
        try:
            return CompletionRecord.from_json(document, "completion record")
        except ValueError as error:  # a field of the wrong type: unreadable as a whole
            raise ManifestError(str(error)) from None

    def discard(self, key: NamespaceKey) -> bool:
        """Recursively delete a task run's snapshots; returns whether anything existed."""
        path = self.namespace_path(key)
        try:
            self._fs.rm(path, recursive=True)
        except FileNotFoundError:
            return False
        finally:
            self._fs.invalidate_cache(path)
        logger.info("discarded snapshot namespace %s", path)
        return True

    def clean_unreferenced(
        self,
        key: NamespaceKey,
        partition: int | None = None,
        *,
        keep_manifests: int = 2,
        grace: timedelta = DEFAULT_GRACE,
    ) -> dict[int, list[str]]:
        """Run :meth:`PartitionSnapshots.clean_unreferenced` on one or all partitions.

        Returns the deleted paths per partition number.
        """
        numbers = self.partitions(key) if partition is None else [partition]
        return {
            number: self.partition(key, number).clean_unreferenced(
                keep_manifests=keep_manifests, grace=grace
            )
            for number in numbers
        }

    def _subdirs(self, path: str) -> list[tuple[str, str]]:
        """(decoded name, path) of the child directories this package could have made."""
        children = []
        for entry in list_entries(self._fs, path):
            name = decode_component(basename(entry["name"]))
            if entry.get("type") == "directory" and name is not None:
                children.append((name, entry["name"].rstrip("/")))
        return sorted(children)
