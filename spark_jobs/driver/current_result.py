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
the run committed) sits in the run's interval partition (:func:`summary_location`).

Only fsspec and the standard library: a reader needs neither Spark nor the job.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import fsspec

from spark_jobs.defaults import INTERVAL_COLUMN

SUMMARY = "_SUMMARY.json"
#: The summary's key naming the run folder; absent in outputs published before run
#: folders existed (their ``data/`` sits beside the summary), null when the run
#: published no records (stopped by ``--max-requests``).
RESULT = "result"


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
    if RESULT not in summary:  # published before run folders: the files sit beside it
        return PublishedResult(location.rstrip("/"), location.rstrip("/"), summary)
    relative = summary[RESULT]
    folder = None if relative is None else resolve(location, relative)
    return PublishedResult(location.rstrip("/"), folder, summary)


def summary_location(
    output: str, output_format: str, interval_start: str, interval_column: str = INTERVAL_COLUMN
) -> str:
    """Where a run's ``_SUMMARY.json`` is: the output's folder, or for a table output the
    folder of the run's interval partition (each interval's publish its own, however many
    publish into the table at once; hidden from table readers by its ``_``)."""
    if output_format == "parquet":
        return output.rstrip("/")
    return interval_folder(output, interval_column, interval_start)


def interval_folder(table: str, column: str, value: str) -> str:
    """``<table>/<column>=<value>``, the value percent-encoded as delta-rs encodes a
    partition folder (``2026-12-01T00%3A00%3A00%2B00%3A00``): the layout Delta writers
    use and engines that read partition values from paths (Polars) need."""
    return f"{table.rstrip('/')}/{column}={quote(value, safe='')}"


def current_data_path(output: str, **storage_options: Any) -> str:
    """The ``data/`` folder of the result ``output`` holds now, in ``output``'s scheme
    (``s3a://`` stays ``s3a://`` for Spark)."""
    return read_result(output, **storage_options).data


def current_dead_letters_path(output: str, **storage_options: Any) -> str:
    """The ``dead_letters/`` folder of the result ``output`` holds now."""
    return read_result(output, **storage_options).dead_letters


def resolve(location: str, relative: str) -> str:
    """``relative`` (a ``result``) joined to ``location`` in its own scheme, normalised."""
    scheme, separator, path = location.rpartition("://")
    joined = posixpath.normpath(posixpath.join(path.rstrip("/") or "/", relative))
    return f"{scheme}{separator}{joined}"


def relative_to(folder: str, location: str) -> str:
    """The ``result`` that makes ``location``'s summary name ``folder`` (same scheme)."""
    return posixpath.relpath(folder.rpartition("://")[2], location.rpartition("://")[2])
