"""What a resuming partition already paid for: the answers it replays, for its LRU cache.

An unbroken run answers a repeated key from the HTTP enricher's LRU cache
(``http.cache_size``) and never pays for it twice. A resumed attempt (after a crash, a
budget stop, Spark's task retry) starts a new enricher: without this it would have
forgotten every key the earlier attempts paid for, and pay again for each one the rest
of the input repeats. So the results it replays (committed segments, and pending
entries that already hold an outcome) fill that LRU cache before the first call, keyed
exactly as the enricher keys a request (``request_keys``).

Memory bound: the index *is* the LRU cache the enricher then uses, so it holds at most
``http.cache_size`` entries of enrichment fields only (the most recently replayed), the
memory an unbroken run spends on it too; replay itself streams batch by batch. Dead
letters are not kept (an unbroken run does not cache failures either), nor anything
when the cache is off (``cache_size`` 0) or with ``--enricher`` (no in-run dedup).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from spark_jobs.asyncwait import OperatorSnapshot
from spark_jobs.enrichers import EnrichmentError
from spark_jobs.enrichers.dedup import LruCache
from spark_jobs.enrichers.request_keys import RequestKeys, request_keys
from spark_jobs.spec.job_spec import JobSpec

from .epoch import ERROR_COLUMN
from .input import InputRows


class PaidAnswers:
    """The answers replayed so far, by request key, in the LRU cache ``answered`` (None,
    and nothing kept, when nothing dedups within a run)."""

    def __init__(self, spec: JobSpec) -> None:
        self._fields = list(spec.response_fields)
        self._keys: RequestKeys | None = None
        self.answered: LruCache[dict[str, Any]] | None = None
        config = None if spec.enricher else spec.http_config()
        if config is not None and config.cache_size:
            self._keys, self.answered = request_keys(config), LruCache(config.cache_size)

    def replayed(self, batch: pa.RecordBatch) -> None:
        """Remember the results of one replayed batch (its rows are inputs and outputs)."""
        if self.answered is None:
            return
        results = batch.filter(batch.column(ERROR_COLUMN).is_null())
        for row in results.to_pylist():
            self._remember(row, {name: row[name] for name in self._fields})

    def restored(self, inputs: InputRows, restored: OperatorSnapshot) -> None:
        """Remember the pending entries that already hold a result (their row is kept)."""
        if self.answered is None:
            return
        for entry in restored.entries:
            if "value" in entry and "record" in entry:
                self._remember(inputs[entry["record"]], entry["value"])

    def _remember(self, row: Mapping[str, Any], value: dict[str, Any]) -> None:
        assert self._keys is not None and self.answered is not None
        try:
            key, _, _ = self._keys(row)
        except EnrichmentError:  # not a request this configuration sends
            return
        self.answered.put(key, value)
