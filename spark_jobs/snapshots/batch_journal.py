"""A partition's provider batches in its namespace: each one's intent before the provider
is asked to create it, and its id once the provider has answered.

A batch run pays for a request when the provider runs it, hours after the call that
created its batch; an attempt killed in between must find that batch again rather than
pay for the requests twice. So before anything is uploaded an intent is written (which
custom_ids the batch holds, and the newest batch the provider listed just before: where
a search for it would stop), and once the create call answers, the batch's id::

    <namespace>/batches/part-00003/<written-at ns>-<token>.intent   custom_ids, newest before
    <namespace>/batches/part-00003/<token>.batch                   its batch id
    <namespace>/batches/part-00003/<token>.progress                its status, as last seen

Beside the partition's own folder, not in it: the partition's cleaner deletes what no
commit references, and a fresh start of the same job before any partition committed
(its driver killed early) keeps the journal (``resume.Decision.keep_batches``). Both
files are sealed (``documents.seal``); a corrupt one is skipped with a warning (its
requests are then found by the search or sent again). Blocking I/O: call it from a
thread.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import replace

from fsspec import AbstractFileSystem
from fsspec.core import url_to_fs

from spark_jobs.records.batch_intent import BatchIntent, BatchProgress
from spark_jobs.records.batch_state import ANTHROPIC_ENDED, OPENAI_ENDED

from .documents import MAX_DOCUMENT_BYTES as LIMIT
from .documents import ManifestError, seal, unseal
from .paths import basename, partition_dir_name
from .storage import list_entries, write_atomically, write_new_file

logger = logging.getLogger(__name__)

BATCHES_DIR = "batches"
FORMAT_VERSION = 1
MAX_BATCH_REQUESTS = 1_000_000
"""More requests than any provider takes in one batch (OpenAI 50 000, Anthropic 100 000)."""
INTENT, BATCH, PROGRESS = ".intent", ".batch", ".progress"
_COUNTS = ("total", "done", "failed")
ENDED_STATUSES = OPENAI_ENDED | ANTHROPIC_ENDED


class BatchJournal:
    """The intents of one partition, in the order they were written."""

    def __init__(self, fs: AbstractFileSystem, namespace_path: str, partition: int) -> None:
        self._fs = fs
        self.directory = f"{namespace_path}/{BATCHES_DIR}/{partition_dir_name(partition)}"

    @classmethod
    def at(cls, snapshot_dir: str, namespace_path: str, partition: int) -> BatchJournal:
        fs, _ = url_to_fs(snapshot_dir)
        return cls(fs, namespace_path, partition)

    def intents(self) -> list[BatchIntent]:
        """Every readable intent, oldest first, with its batch id where one was recorded."""
        names = sorted(basename(e["name"]) for e in list_entries(self._fs, self.directory))
        ids = {n[: -len(BATCH)]: self._read(n) for n in names if n.endswith(BATCH)}
        found = []
        for name in (n for n in names if n.endswith(INTENT)):
            body = self._read(name)
            if body is None:
                continue
            intent = BatchIntent(
                str(body["token"]),
                tuple(body["custom_ids"]),  # type: ignore[arg-type]  # checked in _read
                _text(body.get("newest_before")),
            )
            recorded = ids.get(intent.token)
            if recorded is not None:
                intent = replace(intent, batch_id=str(recorded["batch_id"]))
            found.append(intent)
        return found

    def progress(self) -> list[BatchProgress]:
        """Each batch's status as the partition last saw it, oldest intent first; an
        unreadable or implausible one is left out with a warning."""
        names = sorted(basename(e["name"]) for e in list_entries(self._fs, self.directory))
        found = []
        for name in (n for n in names if n.endswith(PROGRESS)):
            body = self._read(name)
            try:
                found.append(_progress(body or {}))
            except ManifestError as error:
                logger.warning("batch journal: skipping %s/%s: %s", self.directory, name, error)
        return found

    def record_progress(self, intent: BatchIntent, progress: BatchProgress) -> None:
        """Replace what the journal says of ``intent``'s batch at the provider."""
        body = {
            "format_version": FORMAT_VERSION,
            "token": intent.token,
            "batch_id": progress.batch_id,
            "status": progress.status,
            **{count: getattr(progress, count) for count in _COUNTS},
            "seen_at": progress.seen_at,
        }
        write_atomically(self._fs, self.directory, f"{intent.token}{PROGRESS}", seal(body))

    def _read(self, name: str) -> dict[str, object] | None:
        path = f"{self.directory}/{name}"
        try:
            body = unseal(self._fs.cat_file(path, start=0, end=LIMIT + 1), path, FORMAT_VERSION)
            if name.endswith(INTENT):
                ids = body.get("custom_ids")
                if not isinstance(ids, list) or not all(isinstance(c, str) for c in ids):
                    raise ManifestError("custom_ids is not a list of strings")
            return body
        except (FileNotFoundError, ManifestError) as error:
            logger.warning("batch journal: skipping %s: %s", path, error)
            return None

    def record_intent(self, custom_ids: list[str], newest_before: str | None) -> BatchIntent:
        """Write a new batch's intent, before anything of it is sent."""
        intent = BatchIntent(uuid.uuid4().hex, tuple(custom_ids), newest_before)
        body = {
            "format_version": FORMAT_VERSION,
            "token": intent.token,
            "custom_ids": list(custom_ids),
            "newest_before": newest_before,
        }
        name = f"{time.time_ns():020d}-{intent.token}{INTENT}"
        write_new_file(self._fs, self.directory, name, seal(body))
        return intent

    def record_batch(self, intent: BatchIntent, batch_id: str) -> BatchIntent:
        """Write the id the provider gave ``intent``'s batch."""
        body = {"format_version": FORMAT_VERSION, "token": intent.token, "batch_id": batch_id}
        write_new_file(self._fs, self.directory, f"{intent.token}{BATCH}", seal(body))
        return replace(intent, batch_id=batch_id)


def batch_progress(
    fs: AbstractFileSystem, namespace_path: str, partitions: Iterable[int]
) -> dict[int, list[BatchProgress]]:
    """The batches of ``partitions`` that have a journal, as last seen: one listing of
    the namespace's batches folder, then one of each such partition's."""
    present = {basename(e["name"]) for e in list_entries(fs, f"{namespace_path}/{BATCHES_DIR}")}
    return {
        partition: BatchJournal(fs, namespace_path, partition).progress()
        for partition in partitions
        if partition_dir_name(partition) in present
    }


def batches_waited_for(fs: AbstractFileSystem, namespace_path: str) -> list[str]:
    """The ids of the namespace's batches that no partition has seen end: what a run
    detached from its batches (``--detach-batches``) waits for. A batch last seen
    running, or never looked at, is in; one whose progress says it ended is not."""
    folder = f"{namespace_path}/{BATCHES_DIR}"
    waited = []
    for entry in list_entries(fs, folder):
        name = basename(entry["name"])
        if not (name.startswith("part-") and name[5:].isdigit()):
            continue
        journal = BatchJournal(fs, namespace_path, int(name[5:]))
        ended = {p.batch_id for p in journal.progress() if p.status in ENDED_STATUSES}
        waited += [i.batch_id for i in journal.intents() if i.batch_id and i.batch_id not in ended]
    return waited


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _progress(body: dict[str, object]) -> BatchProgress:
    """A progress file's record, its values checked as the page shows them."""
    seen_at = body.get("seen_at")
    if not isinstance(seen_at, (int, float)) or isinstance(seen_at, bool):
        raise ManifestError("seen_at is not a time")
    if not 0 <= seen_at < 1e11:  # NaN too: epoch seconds, before the year 5138
        raise ManifestError(f"seen_at {seen_at} is not a time")
    total, done, failed = (_request_count(body, name) for name in _COUNTS)
    batch_id, status = _short_text(body, "batch_id"), _short_text(body, "status")
    return BatchProgress(batch_id, status, total, done, failed, float(seen_at))


def _short_text(body: dict[str, object], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not 0 < len(value) <= 200:
        raise ManifestError(f"{name} is not a short text")
    return value


def _request_count(body: dict[str, object], name: str) -> int:
    value = body.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ManifestError(f"{name} is not a count")
    if not 0 <= value <= MAX_BATCH_REQUESTS:
        raise ManifestError(f"{name} {value} is more than a batch holds")
    return value
