"""Publishing a run's output without copying: its records stay where the run wrote them,
and one small object written last makes them the output.

A run writes ``data/`` and ``dead_letters/`` into its own folder under the output,
``<output>/runs/<run id>-<token>/`` (:func:`staging_for`). Publishing writes the run's summary,
naming that folder, as ``<output>/_SUMMARY.json`` (see :mod:`spark_jobs.driver.current_result`):
one PUT on S3, one rename on a disk, so a reader finds the old result or the new one,
complete, never a mix, and no object is copied whatever the number of files. Only after
the switch are older run folders removed, all but the one just replaced: a reader that
resolved the summary a moment before the switch can still list and read it whole.

A run that does not publish (failed, fenced off) removes its folder; one a dead-letter
ceiling rejected is named by ``<output>.rejected/_SUMMARY.json`` instead, beside the
output and never read as it. A crash before the switch leaves the previous result
current; the folder it left behind goes at the next publish.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import fsspec
from fsspec import AbstractFileSystem

from spark_jobs.driver.current_result import (
    REJECTED,
    RESULT,
    RUN_FOLDER_CHARS,
    RUNS,
    SUMMARY,
    ResultPathError,
    read_result,
    relative_to,
)
from spark_jobs.records.summary import JobSummary
from spark_jobs.snapshots import LeaseError
from spark_jobs.snapshots.paths import basename
from spark_jobs.snapshots.storage import has_atomic_rename

logger = logging.getLogger(__name__)

#: Where records sat beside the summary before run folders: removed at the first switch,
#: so a reader still reading ``<output>/data/`` fails instead of reading a stale result.
_LEGACY = ("data", "dead_letters")
FENCED = (
    "fenced off: another run took over this namespace before this run published; the "
    "output still names the result it had"
)


@dataclass(frozen=True)
class ParquetRun:
    """One run's Parquet output, as the job drives it (the table output's counterpart is
    ``table_publish.TableRun``): its run folder, the switch, the clean-up."""

    output: str
    staging: str

    @property
    def data(self) -> str:
        return f"{self.staging}/data"

    @property
    def dead_letters(self) -> str:
        return f"{self.staging}/dead_letters"

    def publish(self, summary: JobSummary, holds: Callable[[], bool]) -> JobSummary:
        publish(self.staging, self.output, summary, holds)
        return summary

    def set_aside(self, summary: JobSummary) -> None:
        set_aside(self.staging, self.output, summary)

    def discard(self) -> None:
        discard(self.staging)  # unless a summary names it (published, or set aside)


def staging_for(output: str, run_id: str) -> str:
    """The folder run ``run_id`` writes into: ``<output>/runs/<run id>-<token>``,
    unpublished until the output's summary names it. The token keeps a rerun under the
    same ``--run-id`` out of the folder the output names now: written once, never over."""
    return f"{output.rstrip('/')}/{RUNS}/{_folder_name(run_id)}-{uuid.uuid4().hex[:8]}"


def rejected_for(output: str) -> str:
    """Where the result a dead-letter ceiling rejected is named, beside ``output`` and
    never in it: for a look at its dead letters and for ``--retry-dead-letters``."""
    return f"{output.rstrip('/')}{REJECTED}"


def publish(staging: str, output: str, summary: JobSummary, holds: Callable[[], bool]) -> None:
    """Make the run in ``staging`` the output's result: write ``summary`` naming it as
    ``<output>/_SUMMARY.json``, then remove what it supersedes. ``holds`` is the run's
    lease check: a run fenced off raises :class:`LeaseError` and switches nothing.

    A run stopped by its request budget publishes its summary without records: partial
    output must not look like a result."""
    replaced = _named_run(output)  # kept: a reader may have resolved it just now
    if not holds():
        raise LeaseError(FENCED)
    records = None if summary.budget is not None else staging
    _point(output, summary.to_json(), records)
    if _named_run(rejected_for(output)) is not None:  # superseded by the new result
        _remove(rejected_for(output))
    current = None if records is None else basename(records)
    _remove_runs(output, keep={current, replaced})


def write_summary(location: str, summary: JobSummary) -> None:
    """A table output's ``_SUMMARY.json`` at ``location``: the summary naming the table
    versions the run committed, no run folder (readers read the table, not folders)."""
    _point(location, summary.to_json(), None)


def set_aside(staging: str, output: str, summary: JobSummary) -> None:
    """Name the rejected run in ``staging`` as :func:`rejected_for` ``output`` (replacing
    an older one, whose folder goes); the output itself is left as it was."""
    rejected = rejected_for(output)
    replaced = _named_run(rejected)
    _point(rejected, summary.to_json(), staging)
    if replaced not in (None, basename(staging), _named_run(output)):
        _remove(f"{output.rstrip('/')}/{RUNS}/{replaced}")


def discard(staging: str) -> None:
    """Remove a run folder neither the output nor its rejected result names (a failed or
    fenced run, one stopped by its budget); a published or set-aside one stays."""
    output = staging.rstrip("/").rsplit(f"/{RUNS}/", 1)[0]
    if basename(staging) in (_named_run(output), _named_run(rejected_for(output))):
        return
    _remove(staging)
    fs, root = fsspec.core.url_to_fs(output)
    if has_atomic_rename(fs):  # real directories: leave no empty output behind
        for directory in (f"{root.rstrip('/')}/{RUNS}", root):
            try:
                fs.rmdir(directory)
            except OSError:  # not empty (or gone): it holds a result
                return


def _point(location: str, summary: dict[str, Any], folder: str | None) -> None:
    """Write ``location/_SUMMARY.json`` naming ``folder``, complete or not at all."""
    document = {**summary, RESULT: None if folder is None else relative_to(folder, location)}
    data = json.dumps(document, indent=2, sort_keys=True).encode()
    fs, path = fsspec.core.url_to_fs(location)
    final = f"{path.rstrip('/')}/{SUMMARY}"
    if not has_atomic_rename(fs):
        fs.pipe_file(final, data)  # one PUT: an object store shows all of it or none
        return
    fs.makedirs(path, exist_ok=True)
    temp = f"{final}.{uuid.uuid4().hex[:8]}.tmp"
    fs.pipe_file(temp, data)
    fs.mv(temp, final)


def _named_run(location: str) -> str | None:
    """The run folder name ``location``'s summary names (None: none, or no folder). A
    summary naming something else is not this job's: it protects nothing and is replaced
    (never read through: a ``result`` of ``../..`` made ``set_aside`` remove every run)."""
    try:
        folder = read_result(location).folder
    except FileNotFoundError:
        return None
    except ResultPathError as error:
        logger.warning("%s; it is replaced by this run's", error)
        return None
    return None if folder is None or folder == location.rstrip("/") else basename(folder)


def _remove_runs(output: str, keep: set[str | None]) -> None:
    """Remove every run folder but those in ``keep``, and records left beside the summary
    by the layout before run folders; one listing per level, bulk deletes on S3."""
    fs, root = fsspec.core.url_to_fs(output)
    root = root.rstrip("/")
    levels: tuple[tuple[str, Callable[[str], bool]], ...] = (
        (root, lambda name: name in _LEGACY),
        (f"{root}/{RUNS}", lambda name: name not in keep),
    )
    for level, removed in levels:
        fs.invalidate_cache(level)
        try:
            entries = fs.ls(level, detail=False)
        except FileNotFoundError:
            return
        for entry in entries:
            if removed(basename(entry)):
                _rm(fs, entry)


def _remove(url: str) -> None:
    fs, path = fsspec.core.url_to_fs(url)
    _rm(fs, path)


def _rm(fs: AbstractFileSystem, path: str) -> None:
    try:
        fs.rm(path, recursive=True)
    except FileNotFoundError:
        pass


def _folder_name(run_id: str) -> str:
    """A folder name safe on every filesystem and in Hadoop's URIs: Spark reads run
    folders back (``--retry-dead-letters``) and hands their paths out percent-encoded, so
    no ``%`` (nor ``:`` or ``+``, Airflow's run ids hold both). A run id that needed
    replacing keeps a hash of itself, so two stay apart; the token after it does the rest."""
    safe = re.sub(f"[^{RUN_FOLDER_CHARS}]", "_", run_id)[:80]
    if safe == run_id and set(safe) != {"."}:
        return safe
    return f"{safe}-{hashlib.sha256(run_id.encode()).hexdigest()[:12]}"
