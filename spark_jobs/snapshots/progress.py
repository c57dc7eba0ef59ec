"""Progress as its readers see it: the namespace's progress record, progress read from
the manifests, and a run gone silent.

**The progress record** (``progress.json``): the one document progress readers read. The
driver folds each partition's latest commit into it every ``--progress-interval`` and
writes it atomically (``driver/progress.py``). The driver's progress lines, the job
summary, the Airflow task's Storage tab and the snapshot page read it and never scan
manifests, so reading progress costs one small GET whatever the number of cuts.

Compact on purpose: a partition is one JSON array in the order of :data:`COLUMNS` (about
130 bytes), so 10 000 partitions make about 1.3 MB. A reader refuses a record over
:data:`MAX_RECORD_BYTES`, of another format, or with a value of the wrong type, with a
:class:`ProgressRecordError` naming the row and column: an unreadable record is reported,
never guessed at.

``recent_calls`` says what the calls are getting (``{"429 rate_limit_exceeded": 480}``):
the answers of the last minute by outcome, added up over the partitions still at work,
as each one's latest cut counted them (``enrichers/call_outcomes.py``). A partition that
is throttled finishes nothing, but still cuts on a timer (``partition_runner/runner.py``),
so the record learns of it every snapshot interval. A field beside the partitions rather
than a column: a reader of an earlier version checks the columns and ignores other fields.

Standard library and the snapshots' own records only (fsspec through the lease): the
Airflow side reads it too.

**Progress read from the manifests**, as the store, the resume decision (when a namespace
has no progress record) and the demo see it: plain data that knows nothing of the store
that found it, so the store can return it without an import cycle.

**A run gone silent**, recognised before its lease expires. While a run works, two signs
of life reach its namespace: its partitions' commits (one every ``--snapshot-interval``,
folded into the progress record every ``--progress-interval``) and its driver's lease
renewals (every third of ``--lease-ttl``). A run killed outright (SIGKILL, a lost machine)
leaves a lease that stays live for up to a TTL, all the while looking like a run at work.
Once *both* signs are overdue, each by more than :data:`OVERDUE_FACTOR` times the interval
the run recorded for it (the progress record holds the two intervals, the lease its TTL),
the run is *stalled*: readers say ``no progress for 45 s`` (the time since the last sign)
while the lease still stands. Either sign on time is enough: commits pause while every
partition waits on a slow API, renewals while the storage hiccups; both stop only when the
run is gone or hung.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any

from spark_jobs.records.values import format_count

from .contracts import MAX_OUTCOMES_STORED, PartitionStats, is_outcome_counts
from .documents import ManifestError, parse_stored_json
from .lease import Lease
from .manifest import Manifest
from .paths import MAX_PARTITIONS, NamespaceKey

FORMAT_VERSION = 2
#: Larger records are refused unread (a reader asks for at most this many bytes).
MAX_RECORD_BYTES = 32 * 2**20
#: Attempt ids, run ids and failure reasons are cut to this many characters when written.
MAX_TEXT = 1_000
_INT64 = 2**63
#: The window ``recent_calls`` counts over: the enrichers' (``call_outcomes.WINDOW_S``).
CALLS_WINDOW_S = 60
#: The name of the outcomes beyond those a count names (``call_outcomes.OTHER``).
OTHER_OUTCOMES = "other"


class ProgressRecordError(ValueError):
    """A stored progress record is unreadable: not JSON, too large, another format, or a
    value of the wrong type (the message names the row and column)."""


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _INT64


def _int64(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -_INT64 <= value < _INT64


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or check(value)


def _text(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= MAX_TEXT


def _flag(value: Any) -> bool:
    return isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e12


def describe_progress(epoch: int, done: int, in_flight: int, records_total: int | None) -> str:
    """``epoch 12: 48 213 of 100 000 records committed, 64 in flight``: the one wording of
    progress in logs, the Storage tab and the page."""
    total, spaced = format_count(records_total), format_count(done)
    return f"epoch {epoch}: {spaced} of {total} records committed, {in_flight} in flight"


@dataclass(frozen=True)
class PartitionEntry:
    """One partition as its latest valid commit left it (counters of the chain of attempts
    that led to that commit, as the manifest's stats count them)."""

    partition: int
    epoch: int
    input_offset: int
    records_total: int | None
    committed_rows: int
    dead_letter_rows: int
    in_flight: int
    watermark: int | None
    committed_at_ms: int
    attempt: str
    run_id: str = ""
    finished: bool = False
    budget_exhausted: bool = False
    batches_running: bool = False
    systemic_failure: str | None = None
    resumed: bool = False
    requests_made: int = 0
    response_cache_hits: int = 0
    coalesced_calls: int = 0
    cache_hits: int = 0
    replayed: int = 0
    rss_mb_peak: float = 0.0

    @property
    def done_rows(self) -> int:
        """Records with a committed outcome: enriched or dead letter."""
        return self.committed_rows + self.dead_letter_rows

    @property
    def committed_at(self) -> datetime:
        return datetime.fromtimestamp(self.committed_at_ms / 1000, UTC)

    def settled(self, run_id: str) -> bool:
        """Whether run ``run_id``'s task of this partition has ended (finished, or stopped
        by its budget, detached from its batches, or by a systemic failure): its commit
        will not change in this run."""
        stopped = self.budget_exhausted or self.batches_running
        ended = self.finished or stopped or bool(self.systemic_failure)
        return ended and self.run_id == run_id

    @property
    def stats(self) -> dict[str, Any]:
        """The manifest's stats this record keeps, under the manifest's names."""
        return {
            name: getattr(self, name)
            for name in COLUMNS[COLUMNS.index("run_id") :]
            if getattr(self, name) not in (None, "")
        }


#: The columns of a stored partition row, and what each value must be.
_CHECKS: dict[str, Callable[[Any], bool]] = {
    "partition": lambda value: _count(value) and value < MAX_PARTITIONS,
    "epoch": _count,
    "input_offset": _count,
    "records_total": _optional(_count),
    "committed_rows": _count,
    "dead_letter_rows": _count,
    "in_flight": _count,
    "watermark": _optional(_int64),
    "committed_at_ms": _count,
    "attempt": _text,
    "run_id": _text,
    "finished": _flag,
    "budget_exhausted": _flag,
    "batches_running": _flag,
    "systemic_failure": _optional(_text),
    "resumed": _flag,
    "requests_made": _count,
    "response_cache_hits": _count,
    "coalesced_calls": _count,
    "cache_hits": _count,
    "replayed": _count,
    "rss_mb_peak": _number,
}
COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(PartitionEntry))
assert COLUMNS == tuple(_CHECKS), "every column has its check"
_row = attrgetter(*COLUMNS)
#: The record's other fields: what each must be, and how an error says it.
_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "run_id": (_text, "str"),
    "written_at_ms": (_count, "int"),
    "partition_count": (_count, "int"),
    "records_total": (_optional(_count), "int or null"),
    "corrupt_partitions": (lambda v: isinstance(v, list), "list"),
    "snapshot_interval_ms": (_optional(_count), "int or null"),
    "progress_interval_ms": (_optional(_count), "int or null"),
    "columns": (lambda v: v == list(COLUMNS), f"the {len(COLUMNS)} column names"),
    "partitions": (lambda v: isinstance(v, list), "list"),
    "recent_calls": (
        _optional(is_outcome_counts),
        f"at most {MAX_OUTCOMES_STORED} short names with their counts",
    ),
}
#: Fields added after format 1 was first written: records of earlier versions lack them.
_ADDED = ("snapshot_interval_ms", "progress_interval_ms", "recent_calls")


@dataclass(frozen=True)
class ProgressRecord:
    """Every partition's latest commit, folded into one document by the run ``run_id``.

    ``partition_count`` is the job's (partitions without a commit have no entry);
    ``corrupt_partitions`` have manifest files but not one valid manifest. The run's
    ``--snapshot-interval`` and ``--progress-interval`` (milliseconds; None in records of
    earlier versions) say how often a commit should show here: ``progress.py`` judges by them.
    ``recent_calls``: the running partitions' answers of the last minute by outcome.
    """

    run_id: str
    written_at_ms: int
    partition_count: int
    records_total: int | None
    partitions: tuple[PartitionEntry, ...]
    corrupt_partitions: tuple[int, ...] = ()
    snapshot_interval_ms: int | None = None
    progress_interval_ms: int | None = None
    recent_calls: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        numbers = [p.partition for p in self.partitions]
        if numbers != sorted(set(numbers)):
            raise ProgressRecordError("partitions: not in ascending order without repeats")
        if len(numbers) > MAX_PARTITIONS:
            raise ProgressRecordError(f"partitions: {len(numbers)} is over {MAX_PARTITIONS}")

    @property
    def epoch(self) -> int:
        return max((p.epoch for p in self.partitions), default=0)

    @property
    def done(self) -> int:
        return sum(p.done_rows for p in self.partitions)

    @property
    def in_flight(self) -> int:
        return sum(p.in_flight for p in self.partitions if not p.finished)

    def describe(self, records_total: int | None = None) -> str:
        total = self.records_total if records_total is None else records_total
        return describe_progress(self.epoch, self.done, self.in_flight, total)

    def describe_calls(self) -> str:
        """What the calls are getting, when some are not answered 2xx: ``; all 480
        calls of the last 60 s answered 429 rate_limit_exceeded; retrying``, or ``; last
        60 s: 412 calls, 380 answered 200, 32 429 rate_limit_exceeded``; else nothing.
        ``retrying`` while no call of the window succeeded and records are in flight."""
        calls = sorted(self.recent_calls.items(), key=lambda item: (-item[1], item[0]))
        succeeded = sum(name.startswith("2") for name, _ in calls)
        if succeeded == len(calls):
            return ""  # no call in the window, or every one answered: nothing to explain
        total = format_count(sum(count for _, count in calls))
        counted = [f"{format_count(count)} {name}" for name, count in calls]
        if succeeded:
            (name, most), rest = calls[0], counted[1:]
            said = ", ".join([f"{format_count(most)} answered {name}", *rest])
            return f"; last {CALLS_WINDOW_S} s: {total} calls, {said}"
        if len(calls) == 1:
            said = f"all {total} calls of the last {CALLS_WINDOW_S} s answered {calls[0][0]}"
        else:
            said = f"all {total} calls of the last {CALLS_WINDOW_S} s failed: {', '.join(counted)}"
        return f"; {said}; retrying" if self.in_flight else f"; {said}"

    def watermark(self) -> int | None:
        """The watermark valve's output with partitions as channels, in one pass: a
        finished or missing partition is idle; the minimum over the active ones, the
        maximum when every one is idle; None while an active one has none yet."""
        marks = [p.watermark for p in self.partitions if p.watermark is not None]
        if not marks:
            return None
        active = [p.watermark for p in self.partitions if not p.finished]
        if not active:
            return max(marks)
        return None if None in active else min(m for m in active if m is not None)

    def to_json(self) -> bytes:
        document = {
            "format_version": FORMAT_VERSION,
            "run_id": self.run_id,
            "written_at_ms": self.written_at_ms,
            "partition_count": self.partition_count,
            "records_total": self.records_total,
            "corrupt_partitions": list(self.corrupt_partitions),
            "snapshot_interval_ms": self.snapshot_interval_ms,
            "progress_interval_ms": self.progress_interval_ms,
            "columns": list(COLUMNS),
            "partitions": [_row(p) for p in self.partitions],
            "recent_calls": dict(self.recent_calls),
        }
        return json.dumps(document, separators=(",", ":"), allow_nan=False).encode()

    @classmethod
    def from_json(cls, data: bytes) -> ProgressRecord:
        """Parse and check a stored record; any defect raises :class:`ProgressRecordError`."""
        if len(data) > MAX_RECORD_BYTES:
            raise ProgressRecordError(f"{len(data)} bytes or more, over {MAX_RECORD_BYTES}")
        try:
            document = parse_stored_json(data, "progress record")
        except ManifestError as error:
            raise ProgressRecordError(str(error)) from None
        _check_document(document)
        rows = document["partitions"]
        if len(rows) > MAX_PARTITIONS:
            raise ProgressRecordError(f"partitions: {len(rows)} is over {MAX_PARTITIONS}")
        return cls(
            run_id=document["run_id"],
            written_at_ms=document["written_at_ms"],
            partition_count=document["partition_count"],
            records_total=document["records_total"],
            partitions=tuple(_entry(index, row) for index, row in enumerate(rows)),
            corrupt_partitions=tuple(_corrupt(document["corrupt_partitions"])),
            snapshot_interval_ms=document.get("snapshot_interval_ms"),
            progress_interval_ms=document.get("progress_interval_ms"),
            recent_calls=document.get("recent_calls") or {},
        )


def merge_outcomes(counts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Several partitions' calls by outcome added up, the most frequent named (as many as a
    stored record may hold) and the rest counted as :data:`OTHER_OUTCOMES`."""
    total: Counter[str] = Counter()
    for count in counts:
        total.update(count)
    if len(total) <= MAX_OUTCOMES_STORED:
        return dict(total)
    named = dict(total.most_common(MAX_OUTCOMES_STORED - 1))
    rest = sum(total.values()) - sum(named.values())
    return {**named, OTHER_OUTCOMES: named.get(OTHER_OUTCOMES, 0) + rest}


def _check_document(document: Any) -> None:
    if not isinstance(document, dict):
        raise ProgressRecordError("not a JSON object")
    version = document.get("format_version")
    if version != FORMAT_VERSION:
        raise ProgressRecordError(
            f"format_version {version!r} is not {FORMAT_VERSION} (written by another version)"
        )
    for name, (check, expected) in _FIELDS.items():
        if not (name in document or name in _ADDED) or not check(document.get(name)):
            got = repr(document.get(name, "nothing"))[:80]
            raise ProgressRecordError(f"{name}: expected {expected} as written, got {got}")


def _entry(index: int, row: Any) -> PartitionEntry:
    if not isinstance(row, list) or len(row) != len(COLUMNS):
        raise ProgressRecordError(f"partitions[{index}]: expected a list of {len(COLUMNS)} values")
    for name, value in zip(COLUMNS, row, strict=True):
        if not _CHECKS[name](value):
            raise ProgressRecordError(
                f"partitions[{index}] (partition {row[0]!r:.20}).{name}: "
                f"unexpected value {value!r:.80}"
            )
    return PartitionEntry(*row)


def _corrupt(numbers: Sequence[Any]) -> Iterable[int]:
    for index, number in enumerate(numbers):
        if not _count(number):
            raise ProgressRecordError(f"corrupt_partitions[{index}]: expected an int >= 0")
        yield number


@dataclass(frozen=True)
class PartitionProgress:
    """Progress of one partition according to its best valid manifest."""

    partition: int
    epoch: int
    input_offset: int
    records_total: int | None
    committed_rows: int
    dead_letter_rows: int
    watermark: int | None
    committed_at: datetime
    attempt: str
    in_flight: int = 0
    """Pending operator entries at the cut: requested again (or replayed) on resume."""
    stats: Mapping[str, Any] = field(default_factory=dict)
    """The manifest's stats as stored; :attr:`partition_stats` reads them typed."""

    @property
    def partition_stats(self) -> PartitionStats:
        return PartitionStats.from_json(self.stats)

    @property
    def done_rows(self) -> int:
        """Records with a committed outcome: enriched or dead letter."""
        return self.committed_rows + self.dead_letter_rows

    @classmethod
    def of(cls, manifest: Manifest) -> PartitionProgress:
        if manifest.committed_at is None:
            raise ValueError("only committed manifests have progress")
        return cls(
            partition=manifest.partition,
            epoch=manifest.epoch,
            input_offset=manifest.input_offset,
            records_total=manifest.records_total,
            committed_rows=manifest.committed_rows,
            dead_letter_rows=manifest.dead_letter_rows,
            watermark=manifest.watermark,
            committed_at=manifest.committed_at,
            attempt=manifest.attempt,
            in_flight=len(manifest.pending),
            stats=dict(manifest.stats),
        )


@dataclass(frozen=True)
class NamespaceInfo:
    """One task run found under the store root, with per-partition progress from their
    best manifests, and its totals (what :class:`ProgressRecord` above says of a
    namespace, for one without a record: a run of an older version)."""

    key: NamespaceKey
    partitions: tuple[PartitionProgress, ...]

    @property
    def epoch(self) -> int:
        return max((p.epoch for p in self.partitions), default=0)

    @property
    def done(self) -> int:
        return sum(p.done_rows for p in self.partitions)

    @property
    def in_flight(self) -> int:
        return sum(p.in_flight for p in self.partitions if not p.partition_stats.finished)

    def describe(self, records_total: int | None) -> str:
        return describe_progress(self.epoch, self.done, self.in_flight, records_total)


#: A sign of life is overdue after this many of its expected intervals without one.
OVERDUE_FACTOR = 2


@dataclass(frozen=True)
class Stall:
    """A live lease whose run has shown no sign of life for ``silent_s`` seconds; the
    lease expires ``expires_in_s`` seconds from the reading (then the run counts as
    interrupted, and another run may take the namespace over)."""

    silent_s: float
    expires_in_s: float

    def describe(self) -> str:
        """``no progress for 45 s``: the one wording of the page and the Storage tab."""
        return f"no progress for {_duration(self.silent_s)}"

    def explain(self) -> str:
        """The longer wording, for a tooltip."""
        return (
            f"{self.describe()}: neither a commit nor a lease renewal for over "
            f"{OVERDUE_FACTOR} times the intervals the run recorded; its lease expires in "
            f"{_duration(self.expires_in_s)}, then the page says interrupted"
        )


def _duration(seconds: float) -> str:
    whole = max(int(seconds), 0)
    return f"{whole} s" if whole < 120 else f"{whole // 60} min {whole % 60} s"


def commit_interval(record: ProgressRecord) -> float | None:
    """Seconds within which a commit of a working run shows in its progress record (a
    snapshot interval, then a progress interval); None in records of earlier versions."""
    if record.snapshot_interval_ms is None or record.progress_interval_ms is None:
        return None
    return (record.snapshot_interval_ms + record.progress_interval_ms) / 1000


def stall_of(record: ProgressRecord | None, lease: Lease | None, now: float) -> Stall | None:
    """The stall of the run holding ``lease`` at ``now`` (Unix time), or None while it shows
    signs of life, when no live lease stands (nothing runs: readers say interrupted) or
    when the lease does not say when it was renewed (written by an earlier version)."""
    if lease is None or not lease.in_force(now):
        return None
    renewal = lease.renewal_interval
    if lease.renewed_at is None or renewal is None or renewal <= 0:
        return None
    if now - lease.renewed_at <= OVERDUE_FACTOR * renewal:
        return None
    last = lease.renewed_at
    if record is not None and record.partitions:
        last_commit = max(p.committed_at_ms for p in record.partitions) / 1000
        # A record without intervals (an earlier version): commits judged like renewals.
        if now - last_commit <= OVERDUE_FACTOR * (commit_interval(record) or renewal):
            return None
        last = max(last, last_commit)
    return Stall(silent_s=now - last, expires_in_s=lease.expires_at - now)
