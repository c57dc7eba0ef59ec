"""Finding the result an output holds now: ``<output>/_SUMMARY.json`` names it.

A run writes its records once, into a folder of its own under the output
(``<output>/runs/<run id>-<token>/data/`` and ``dead_letters/``), and publishes by writing
``<output>/_SUMMARY.json`` last: the run's summary plus ``result``, the path of that run
folder relative to the summary's own folder. That one small object is what switches
readers from one complete result to the next (one PUT on S3, one rename on a disk), so
nothing is ever copied and a reader that resolves it once reads one run's files only.

Readers resolve it once and read what it names (Spark, pandas, pyarrow alike)::

    spark.read.parquet(current_data_path("s3a://bucket/out"))
    pandas.read_parquet(current_data_path("s3://bucket/out"))
    pyarrow.parquet.read_table(current_dead_letters_path("/data/out"))

A table output (``--output-format delta``) is read as a table; its summary (the versions
the run committed) sits in the run's interval partition
(:func:`spark_jobs.defaults.summary_location`).

Only fsspec and the standard library: a reader needs neither Spark nor the job.

``result`` is read as a pointer into the output, never anywhere: ``runs/<run folder>``, or
in ``<name>.rejected`` the ``../<name>/runs/<run folder>`` a rejected run is named by
(:func:`confined`). Whoever can write a summary could otherwise point readers, and
``--retry-dead-letters``, which publishes the rows it reads, at any path their
credentials reach.
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass
from typing import Any

import fsspec

SUMMARY = "_SUMMARY.json"
#: The summary's key naming the run folder; absent in outputs published before run
#: folders existed (their ``data/`` sits beside the summary), null when the run
#: published no records (stopped by ``--max-requests``).
RESULT = "result"
#: The output's folder of run folders, and the suffix of the folder naming a rejected run.
RUNS = "runs"
REJECTED = ".rejected"
#: The characters of a run folder's name (``publish._folder_name`` keeps only these).
RUN_FOLDER_CHARS = "A-Za-z0-9_.-"
_RUN_FOLDER = re.compile(f"[{RUN_FOLDER_CHARS}]+")


class ResultPathError(ValueError):
    """A summary's ``result`` names something other than a run folder of its output."""


class NoDataError(LookupError):
    """The current result holds no records (its run stopped on its request budget)."""


@dataclass(frozen=True)
class PublishedResult:
    """What ``<location>/_SUMMARY.json`` names: the summary and the run folder."""

    location: str
    """The folder holding the summary: the output, or ``<output>.rejected``."""
    folder: str | None
    """The run folder with ``data/`` and ``dead_letters/``; None when it has no records."""
    summary: dict[str, Any]

    @property
    def data(self) -> str:
        return f"{self._records()}/data"

    @property
    def dead_letters(self) -> str:
        return f"{self._records()}/dead_letters"

    def _records(self) -> str:
        if self.folder is None and "table" in self.summary:
            raise NoDataError(
                f"{self.location} is a table (--output-format "
                f"{self.summary['table'].get('format')}): read it as one"
            )
        if self.folder is None:
            raise NoDataError(
                f"{self.location}: run {self.summary.get('run_id')} published no records "
                "(it stopped on its request budget, --max-requests); run the job again to "
                "resume it"
            )
        return self.folder


def read_result(location: str, **storage_options: Any) -> PublishedResult:
    """The result ``location/_SUMMARY.json`` names; ``FileNotFoundError`` when nothing
    was published there. ``storage_options`` go to fsspec (endpoint, credentials)."""
    fs, path = fsspec.core.url_to_fs(location, **storage_options)
    try:
        summary = json.loads(fs.cat_file(f"{path.rstrip('/')}/{SUMMARY}"))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"no result published under {location} (no {SUMMARY} there)"
        ) from None
    if not isinstance(summary, dict):
        raise ResultPathError(f"{location.rstrip('/')}/{SUMMARY}: not a JSON object")
    if RESULT not in summary:  # published before run folders: the files sit beside it
        return PublishedResult(location.rstrip("/"), location.rstrip("/"), summary)
    relative = summary[RESULT]
    folder = None if relative is None else resolve(location, confined(location, relative))
    return PublishedResult(location.rstrip("/"), folder, summary)


def current_data_path(output: str, **storage_options: Any) -> str:
    """The ``data/`` folder of the result ``output`` holds now, in ``output``'s scheme
    (``s3a://`` stays ``s3a://`` for Spark)."""
    return read_result(output, **storage_options).data


def current_dead_letters_path(output: str, **storage_options: Any) -> str:
    """The ``dead_letters/`` folder of the result ``output`` holds now."""
    return read_result(output, **storage_options).dead_letters


def confined(location: str, relative: object) -> str:
    """``relative``, the ``result`` of ``location``'s summary, if it names one run folder
    of the output: ``runs/<run folder>``, or ``../<name>/runs/<run folder>`` when
    ``location`` is ``<name>.rejected``; else :class:`ResultPathError` naming the file and
    the value (``..``, an absolute path or URL, more or fewer components, another name)."""
    name = posixpath.basename(location.rstrip("/"))
    stem = name.removesuffix(REJECTED) if name.endswith(REJECTED) else None
    parts = relative.split("/") if isinstance(relative, str) else []
    if stem not in (None, "", ".", "..") and parts[:2] == ["..", stem]:
        parts = parts[2:]  # a rejected run, named from beside the output
    if len(parts) == 2 and parts[0] == RUNS and _run_folder(parts[1]):
        return str(relative)
    shape = f"{RUNS}/<run folder>" + (f" or ../{stem}/{RUNS}/<run folder>" if stem else "")
    raise ResultPathError(
        f"{location.rstrip('/')}/{SUMMARY}: result {relative!r} is not {shape}; "
        "refusing to read it (was the summary written by this job?)"
    )


def _run_folder(name: str) -> bool:
    return _RUN_FOLDER.fullmatch(name) is not None and name.strip(".") != ""


def resolve(location: str, relative: str) -> str:
    """``relative`` (a ``result``) joined to ``location`` in its own scheme, normalised."""
    scheme, separator, path = location.rpartition("://")
    joined = posixpath.normpath(posixpath.join(path.rstrip("/") or "/", relative))
    return f"{scheme}{separator}{joined}"


def relative_to(folder: str, location: str) -> str:
    """The ``result`` that makes ``location``'s summary name ``folder`` (same scheme)."""
    return posixpath.relpath(folder.rpartition("://")[2], location.rpartition("://")[2])
