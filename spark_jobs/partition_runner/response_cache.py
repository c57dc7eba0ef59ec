"""A response cache across runs: pay once per key, not once per day.

Teams enrich the same customers, products or addresses every day. Within a run the HTTP
enricher already shares identical requests; this cache keeps the raw bodies of successful
answers on the job's own storage (local, ``s3://``, ``hdfs://`` through fsspec), so the
next run answers them without a call while they are younger than the TTL. No extra
server is needed on a cluster.

Layout: ``<cache dir>/partitions=N/part-PPPPP/<written-at>-<token>.parquet``. A partition
reads only its own folder (records reach the same partition by the job's key hash), so
its memory holds only the entries it may need. Files are immutable: a run adds one per
partition at each snapshot cut that has new answers (``take`` on the event loop, ``write``
in the committer's thread), so a crash loses no answer a cut has seen and memory holds at
most the answers since the last cut; a partition that finds more than
``MERGE_AFTER_FILES`` live files merges them into one as it loads. Each file has ``key,
stored_at, payload, check`` columns; ``check`` is an HMAC of scope, key, time and body
under a key only the deployment has (``cache_scope.py``), so a corrupt, forged or copied
file or row is skipped (its keys are called again), never served, and so is an entry
stored in the future (it would never expire) or larger than ``max_entry_bytes``. A file
is sized from the listing before it is read, read with a bound, and its Parquet footer
checked before its rows are decompressed. A file whose newest entry has expired is
deleted by the partition reading it, only within its own scope. Only raw 2xx bodies are
stored: a changed response-field configuration still hits, and a changed URL or body is
another key. Requests are keyed by method, URL and body within the scope of the
credentials and headers that asked (``<cache dir>/scope-<hex>/partitions=N/...``).
"""

from __future__ import annotations

import contextlib
import hmac
import io
import logging
import math
import time
import uuid
from collections.abc import Callable

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs.enrichers.request_keys import request_key
from spark_jobs.partition_runner.cache_scope import CacheScope
from spark_jobs.snapshots.storage import list_entries, write_new_file

logger = logging.getLogger(__name__)

_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("stored_at", pa.float64()),
        ("payload", pa.binary()),
        ("check", pa.string()),
    ]
)
DEFAULT_MAX_ENTRY_BYTES = 256 * 2**10
#: Larger cache files (on storage, or their rows uncompressed) are skipped unread.
MAX_FILE_BYTES = 256 * 2**20
#: How far ahead of this host's clock another host's ``stored_at`` may be.
CLOCK_SKEW_S = 300.0
#: A partition that finds more live files than this merges them into one as it loads:
#: every cut of a run adds a file, and the next runs would otherwise read them all again.
MERGE_AFTER_FILES = 16


class CacheFileError(ValueError):
    """A cache file too large to read, or not a cache file."""


def read_cache_file(fs: fsspec.AbstractFileSystem, info: dict[str, object]) -> pa.Table:
    """The rows of the cache file in listing entry ``info``: its size checked from the
    listing, read with a bound, and its uncompressed size from the Parquet footer before
    any row is decompressed; raises :class:`CacheFileError` or a read error."""
    size = info.get("size")
    if not isinstance(size, int) or size > MAX_FILE_BYTES:
        raise CacheFileError(f"{size} bytes, over {MAX_FILE_BYTES}")
    data = fs.cat_file(info["name"], start=0, end=MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise CacheFileError(f"grew past {MAX_FILE_BYTES} bytes since it was listed")
    parquet = pq.ParquetFile(io.BytesIO(data))
    meta = parquet.metadata
    unpacked = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    if unpacked > MAX_FILE_BYTES:
        raise CacheFileError(f"{unpacked} bytes uncompressed, over {MAX_FILE_BYTES}")
    if parquet.schema_arrow != _SCHEMA:
        raise CacheFileError("not a response cache file (other columns)")
    return parquet.read()


Answers = dict[str, tuple[float, bytes]]
"""New answers by key: (stored at, raw body)."""


class ResponseCache:
    """One partition's part of the cache: ``load()``, then ``get``/``put``, with ``take()``
    and ``write()`` at each cut and ``flush()`` at the end.

    ``load``, ``write`` and ``flush`` do blocking storage I/O (run them in a thread);
    ``get``, ``put`` and ``take`` are memory-only and cheap enough for the hot path. A new
    answer is kept in memory only until the next ``take``: after that, repeats within the
    run are the in-run LRU cache's job (``http.cache_size``), and the next run loads it.
    """

    def __init__(
        self,
        url: str,
        *,
        partition: int,
        partitions: int,
        ttl_s: float,
        scope: CacheScope,
        max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``scope``: the signing key and the folder of the credentials and headers that
        ask (``cache_scope.py``); only that folder is read, merged and cleaned."""
        if not 0 < ttl_s < math.inf:
            raise ValueError(f"ttl must be a finite number of seconds > 0, got {ttl_s!r}")
        self.fs, root = fsspec.core.url_to_fs(url)
        self.scope = scope
        self.directory = (
            f"{root.rstrip('/')}/{scope.name}/partitions={partitions}/part-{partition:05d}"
        )
        self.ttl_s = ttl_s
        self.max_entry_bytes = max_entry_bytes
        self._clock = clock
        self._entries: dict[str, tuple[float, bytes]] = {}
        self._new: Answers = {}
        self.hits = 0
        self.stored = 0
        self.files_written = 0
        self.most_held = 0  # the most new answers held in memory at once (at a take)
        self.skipped_corrupt = 0
        self.expired_files_deleted = 0

    def load(self) -> None:
        """Read this partition's unexpired entries; skip corrupt ones, delete dead files."""
        now = self._clock()
        live = []
        for info in list_entries(self.fs, self.directory):
            name = info["name"]
            if not name.endswith(".parquet"):
                continue
            try:
                table = read_cache_file(self.fs, info)
            except FileNotFoundError:
                continue  # merged or removed by another attempt since the listing
            except (OSError, ValueError, pa.ArrowException) as error:
                self.skipped_corrupt += 1
                logger.warning("response cache: skipping unreadable %s: %s", name, error)
                continue
            newest = self._take(table, now)
            if newest is not None and newest + self.ttl_s <= now:
                self.fs.rm_file(name)
                self.expired_files_deleted += 1
            elif newest is not None:
                live.append(name)
        if len(live) > MERGE_AFTER_FILES:
            self._merge(live)
        logger.info(
            "response cache: %d entries for %s (%d corrupt skipped, %d expired files removed)",
            len(self._entries),
            self.directory,
            self.skipped_corrupt,
            self.expired_files_deleted,
        )

    def _merge(self, files: list[str]) -> None:
        """Write the live entries as one file, then remove the files they came from (a
        kill in between leaves both: the same entries twice, never fewer)."""
        try:
            self._write_file(self._entries)
            for name in files:
                with contextlib.suppress(FileNotFoundError):  # merged by another attempt
                    self.fs.rm_file(name)
        except OSError as error:
            logger.warning("response cache: could not merge %s: %s", self.directory, error)

    def _take(self, table: pa.Table, now: float) -> float | None:
        """Keep the valid, unexpired rows of one file; returns its newest time."""
        newest = None
        columns = table.to_pydict()
        for key, stored_at, payload, check in zip(
            columns["key"], columns["stored_at"], columns["payload"], columns["check"], strict=True
        ):
            if not self._valid(key, stored_at, payload, check, now):
                self.skipped_corrupt += 1
                continue
            newest = stored_at if newest is None else max(newest, stored_at)
            if stored_at + self.ttl_s > now and stored_at > self._entries.get(key, (0.0,))[0]:
                self._entries[key] = (stored_at, payload)
        return newest

    def _valid(
        self, key: object, stored_at: object, payload: object, check: object, now: float
    ) -> bool:
        """Whether a row is one this deployment wrote for this scope: signed, not from
        the future (it would never expire), not larger than a kept answer."""
        if not (
            isinstance(key, str)
            and isinstance(stored_at, float)
            and isinstance(payload, bytes)
            and isinstance(check, str)
        ):
            return False
        if not 0 < stored_at <= now + CLOCK_SKEW_S or len(payload) > self.max_entry_bytes:
            return False
        expected = self._check(key, stored_at, payload)
        return hmac.compare_digest(check.encode(), expected.encode())  # any text compares

    def _check(self, key: str, stored_at: float, payload: bytes) -> str:
        return self.scope.sign(key.encode(), repr(stored_at).encode(), payload)

    def get(self, method: str, url: object, body: str | None) -> bytes | None:
        """The stored body of this request, if one younger than the TTL exists."""
        key = request_key(method, url, body)
        entry = self._new.get(key) or self._entries.get(key)
        if entry is None or entry[0] + self.ttl_s <= self._clock():
            return None
        self.hits += 1
        return entry[1]

    def put(self, method: str, url: object, body: str | None, payload: bytes) -> None:
        """Remember a successful raw answer (too large ones are not kept)."""
        if len(payload) > self.max_entry_bytes:
            return
        self._new[request_key(method, url, body)] = (self._clock(), payload)

    @property
    def held(self) -> int:
        """New answers in memory, not yet taken for a file."""
        return len(self._new)

    def take(self) -> Answers:
        """The new answers since the last take, handed over to be written (they leave
        this cache's memory: a snapshot cut writes them, see ``write``)."""
        answers, self._new = self._new, {}
        self.most_held = max(self.most_held, len(answers))
        return answers

    def flush(self) -> None:
        """Write what is still held (the end of the partition) as one new file."""
        self.write(self.take())

    def keep(self, answers: Answers) -> None:
        """``write``, for the job: a cache that cannot be written costs calls next time,
        never this run's output."""
        try:
            self.write(answers)
        except OSError as error:
            logger.warning("response cache: could not write %s: %s", self.directory, error)

    def write(self, answers: Answers) -> None:
        """Write ``answers`` as new immutable files (one unless they are many MiB; none
        when empty)."""
        if answers:
            self.files_written += self._write_file(answers)
            self.stored += len(answers)

    def _write_file(self, answers: Answers) -> int:
        """Write ``answers`` in files a reader accepts (rows of at most half of
        ``MAX_FILE_BYTES``: a merge or a busy cut could hold more); returns how many."""
        chunks: list[list[str]] = [[]]
        size = 0
        for key, (_, payload) in answers.items():
            if chunks[-1] and size + len(payload) > MAX_FILE_BYTES // 2:
                chunks.append([])
                size = 0
            chunks[-1].append(key)
            size += len(payload) + len(key) + 64
        for keys in chunks:
            self._write_chunk({key: answers[key] for key in keys})
        return len(chunks)

    def _write_chunk(self, answers: Answers) -> None:
        keys = list(answers)
        times = [answers[k][0] for k in keys]
        payloads = [answers[k][1] for k in keys]
        checks = [self._check(k, t, p) for k, t, p in zip(keys, times, payloads, strict=True)]
        table = pa.table([keys, times, payloads, checks], schema=_SCHEMA)
        buffer = io.BytesIO()
        pq.write_table(table, buffer)
        name = f"{int(self._clock() * 1000):015d}-{uuid.uuid4().hex[:12]}.parquet"
        write_new_file(self.fs, self.directory, name, buffer.getvalue())
