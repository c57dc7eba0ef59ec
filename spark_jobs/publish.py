"""Publishing a run's output in one step: ``data/``, ``dead_letters/`` and ``_SUMMARY.json``
appear together or not at all, and never mixed with files of another run.

The run writes everything into a staging directory beside the output
(``<output>.staging-<run id>``) and publishes it at the end. On filesystems that rename
atomically (local disks, HDFS) publishing is two renames: the old output moves aside and
the staging directory takes its name, so a reader sees the old result, the new one, or
for an instant none, never half of one. Object stores (S3) cannot rename a directory:
there the old objects are removed and the new ones copied, ``_SUMMARY.json`` last, so
its ``run_id`` tells a reader which run the files belong to once it is there.
"""

from __future__ import annotations

import json
from typing import Any

import fsspec

from spark_jobs.snapshots.storage import has_atomic_rename

SUMMARY = "_SUMMARY.json"


def staging_for(output: str, run_id: str) -> str:
    """Where run ``run_id`` writes before publishing to ``output``."""
    return f"{output.rstrip('/')}.staging-{run_id}"


def rejected_for(output: str) -> str:
    """Where the result a dead-letter ceiling rejected is kept, beside ``output`` and never
    in it: for a look at its dead letters and for ``--retry-dead-letters``."""
    return f"{output.rstrip('/')}.rejected"


def set_aside(staging: str, output: str) -> None:
    """Keep a rejected staged result as :func:`rejected_for` ``output`` (replacing an
    older one); the output itself is left as it was."""
    discard(rejected_for(output))
    fs, source = fsspec.core.url_to_fs(staging)
    fs.mv(source, fsspec.core.url_to_fs(rejected_for(output))[1], recursive=True)


def write_summary(directory: str, summary: dict[str, Any]) -> None:
    with fsspec.open(f"{directory.rstrip('/')}/{SUMMARY}", "w") as file:
        json.dump(summary, file, indent=2, sort_keys=True)


def drop_data(directory: str) -> None:
    """Remove ``data/`` and ``dead_letters/`` (a run that must not publish records)."""
    fs, root = fsspec.core.url_to_fs(directory)
    for name in ("data", "dead_letters"):
        if fs.exists(f"{root.rstrip('/')}/{name}"):
            fs.rm(f"{root.rstrip('/')}/{name}", recursive=True)


def discard(staging: str) -> None:
    """Remove a staging directory that was not published (a failed or fenced run)."""
    fs, path = fsspec.core.url_to_fs(staging)
    if fs.exists(path):
        fs.rm(path, recursive=True)


def publish(staging: str, output: str) -> None:
    """Make ``staging``'s content the output, replacing what was there (and a rejected
    result beside it: the new output supersedes it)."""
    _publish(staging, output)
    discard(rejected_for(output))


def _publish(staging: str, output: str) -> None:
    fs, source = fsspec.core.url_to_fs(staging)
    target = fsspec.core.url_to_fs(output)[1].rstrip("/")
    if has_atomic_rename(fs):
        old = f"{source}.replaced"
        if fs.exists(target):
            fs.mv(target, old, recursive=True)
        fs.mv(source, target, recursive=True)
        if fs.exists(old):
            fs.rm(old, recursive=True)
        return
    if fs.exists(target):
        fs.rm(target, recursive=True)
    files = sorted(fs.find(source), key=lambda path: path.endswith(SUMMARY))
    for path in files:  # the summary last: it marks the output complete
        fs.copy(path, target + path[len(source) :])
    fs.rm(source, recursive=True)
