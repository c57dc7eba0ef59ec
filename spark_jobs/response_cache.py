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
stored_at, payload, check`` columns; ``check`` covers key, time and body, so a corrupt
file or row is skipped (its keys are called again), never served. A file whose newest
entry has expired is deleted by the partition reading it. Only raw 2xx bodies are
stored: a changed response-field configuration still hits, and a changed URL or body is
another key.
Requests are keyed by method, URL and body, never by the token (it travels in headers).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import time
import uuid
from collections.abc import Callable

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

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
#: A partition that finds more live files than this merges them into one as it loads:
#: every cut of a run adds a file, and the next runs would otherwise read them all again.
MERGE_AFTER_FILES = 16


def request_key(method: str, url: object, body: str | None) -> str:
    """The cache key of one request (no header, so never the token)."""
    return hashlib.sha256(f"{method}\n{url}\n{body or ''}".encode()).hexdigest()


def _check(key: str, stored_at: float, payload: bytes) -> str:
    digest = hashlib.sha256(f"{key}\n{stored_at!r}\n".encode())
    digest.update(payload)
    return digest.hexdigest()[:32]


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
        max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if ttl_s <= 0:
            raise ValueError(f"ttl must be > 0 seconds, got {ttl_s!r}")
        self.fs, root = fsspec.core.url_to_fs(url)
        self.directory = f"{root.rstrip('/')}/partitions={partitions}/part-{partition:05d}"
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
                table = pq.read_table(io.BytesIO(self.fs.cat_file(name)), schema=_SCHEMA)
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
            if check != _check(key, stored_at, payload):
                self.skipped_corrupt += 1
                continue
            newest = stored_at if newest is None else max(newest, stored_at)
            if stored_at + self.ttl_s > now and stored_at > self._entries.get(key, (0.0,))[0]:
                self._entries[key] = (stored_at, payload)
        return newest

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
        """Write ``answers`` as one new immutable file (none when empty)."""
        if answers:
            self._write_file(answers)
            self.stored += len(answers)
            self.files_written += 1

    def _write_file(self, answers: Answers) -> None:
        keys = list(answers)
        times = [answers[k][0] for k in keys]
        payloads = [answers[k][1] for k in keys]
        checks = [_check(k, t, p) for k, t, p in zip(keys, times, payloads, strict=True)]
        table = pa.table([keys, times, payloads, checks], schema=_SCHEMA)
        buffer = io.BytesIO()
        pq.write_table(table, buffer)
        name = f"{int(self._clock() * 1000):015d}-{uuid.uuid4().hex[:12]}.parquet"
        write_new_file(self.fs, self.directory, name, buffer.getvalue())
