"""The manifest: a partition's progress, and the segments that hold its committed rows.

In memory a :class:`Manifest` lists *every* segment committed so far (inherited ones
included), so restoring needs one manifest and never a chain of them. On storage, format 1
(``manifests/``) wrote it whole at every cut; format 2 (``commit_file.py``) writes only a
cut's delta and points at a self-contained base commit. Both carry a sha256 of their own
canonical body and the sha256 of every segment, so a torn write, a bit flip or a truncated
upload is detected on read and the reader falls back to an older commit instead of
resuming from garbage.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .contracts import check_stats
from .documents import ManifestError, is_sha256_hex, seal, unseal
from .paths import COMMIT_PATH, SEGMENT_PATH, encode_component

#: The snapshot format this package writes (format 2: delta commits, ``commit_file.py``).
FORMAT_VERSION = 2
#: Format 1: one self-contained manifest per cut under ``manifests/``; still read.
MANIFEST_FORMAT = 1
SEGMENT_KINDS = ("results", "dead_letters")
#: The keys of a format-1 manifest, which a format-2 commit header extends.
BODY_KEYS = frozenset(
    {
        "format_version",
        "job_fingerprint",
        "partition",
        "epoch",
        "input_offset",
        "pending",
        "segments",
        "watermark",
        "attempt",
        "committed_at",
        "records_total",
        "stats",
    }
)


def _int(name: str, value: object, *, minimum: int | None = 0, optional: bool = False) -> None:
    if value is None and optional:
        return
    # bool is an int subclass; True as an offset is always a bug.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


@dataclass(frozen=True)
class SegmentRef:
    """Committed rows of one kind: an immutable Arrow IPC file of the partition, or the
    byte range ``[offset, offset + size)`` of a format-2 commit file that carries a cut's
    rows inline.

    ``path`` is relative to the partition directory and must have the exact shape this
    package writes, so a manifest can never point a reader outside its partition.
    ``size`` (bytes) lets cheap checks detect missing or truncated files from a listing.
    ``level`` is the compaction level: 0 for a cut's rows, n + 1 for a merge of level n.
    """

    path: str
    kind: str
    rows: int
    sha256: str
    size: int
    offset: int = 0
    level: int = 0

    def __post_init__(self) -> None:
        if self.kind not in SEGMENT_KINDS:
            raise ValueError(f"segment kind must be one of {SEGMENT_KINDS}, got {self.kind!r}")
        if not isinstance(self.path, str) or not (
            SEGMENT_PATH.fullmatch(self.path) or COMMIT_PATH.fullmatch(self.path)
        ):
            raise ValueError(f"invalid segment path {self.path!r}")
        if not self.inline and not self.path.startswith(f"segments/{self.kind}-"):
            raise ValueError(f"segment path {self.path!r} does not match kind {self.kind!r}")
        _int("segment rows", self.rows)
        _int("segment size", self.size)
        _int("segment offset", self.offset)
        _int("segment level", self.level)
        if not is_sha256_hex(self.sha256):
            raise ValueError(f"segment sha256 must be 64 lowercase hex digits: {self.sha256!r}")

    @property
    def inline(self) -> bool:
        """Whether the rows sit inside a commit file rather than in a segment file."""
        return COMMIT_PATH.fullmatch(self.path) is not None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Manifest:
    """A partition snapshot: input offset, in-flight operator entries and committed segments.

    ``pending`` holds the caller's opaque, JSON-serialisable in-flight entries; they come
    back JSON-decoded (tuples become lists).  ``pending`` and ``segments`` are stored as
    tuples whatever sequence is passed; build successors with :meth:`advance`.
    ``committed_at`` is set by :meth:`PartitionSnapshots.commit`; any value passed in is
    replaced there.
    """

    job_fingerprint: str
    partition: int
    epoch: int
    input_offset: int
    attempt: str
    pending: Sequence[Any] = ()
    segments: Sequence[SegmentRef] = ()
    watermark: int | None = None
    records_total: int | None = None
    stats: Mapping[str, Any] = field(default_factory=dict)
    committed_at: datetime | None = None

    def __post_init__(self) -> None:
        if isinstance(self.pending, str | bytes | Mapping):
            raise ValueError("pending must be a sequence of entries")
        if not isinstance(self.stats, Mapping):
            raise ValueError("stats must be a mapping")
        # Defensive copies: a frozen manifest must not change when the caller later
        # mutates the list or dict it was built from.
        object.__setattr__(self, "pending", tuple(self.pending))
        object.__setattr__(self, "segments", tuple(self.segments))
        object.__setattr__(self, "stats", dict(self.stats))
        if not isinstance(self.job_fingerprint, str) or not self.job_fingerprint:
            raise ValueError("job_fingerprint must be a non-empty str")
        _int("partition", self.partition)
        _int("epoch", self.epoch)
        _int("input_offset", self.input_offset)
        _int("watermark", self.watermark, minimum=None, optional=True)
        _int("records_total", self.records_total, optional=True)
        encode_component("attempt", self.attempt)
        if not all(isinstance(s, SegmentRef) for s in self.segments):
            raise ValueError("segments must be SegmentRef instances")
        if len({(s.path, s.offset) for s in self.segments}) != len(self.segments):
            raise ValueError("a segment is listed twice")
        if not all(isinstance(k, str) for k in self.stats):
            raise ValueError("stats keys must be str")
        check_stats(self.stats)
        if self.committed_at is not None and self.committed_at.utcoffset() is None:
            raise ValueError("committed_at must be timezone-aware")

    def advance(
        self,
        *,
        attempt: str,
        input_offset: int,
        pending: Iterable[Any],
        new_segments: Iterable[SegmentRef] = (),
        **changes: Any,
    ) -> Manifest:
        """The next epoch's manifest: inherits every segment, so it stays self-contained.

        ``changes`` may override ``watermark``, ``records_total`` or ``stats``.
        """
        if input_offset < self.input_offset:
            raise ValueError(
                f"input_offset must not go backwards ({input_offset} < {self.input_offset})"
            )
        return dataclasses.replace(
            self,
            epoch=self.epoch + 1,
            attempt=attempt,
            input_offset=input_offset,
            pending=tuple(pending),
            segments=(*self.segments, *new_segments),
            committed_at=None,
            **changes,
        )

    @property
    def committed_rows(self) -> int:
        """Result rows already durable (dead letters excluded)."""
        return sum(s.rows for s in self.segments if s.kind == "results")

    @property
    def dead_letter_rows(self) -> int:
        return sum(s.rows for s in self.segments if s.kind == "dead_letters")

    def progress_key(self) -> tuple[int, int, datetime]:
        """Restore order: most input consumed, then highest epoch, then latest commit."""
        if self.committed_at is None:
            raise ValueError("only committed manifests have a progress key")
        return (self.input_offset, self.epoch, self.committed_at)

    def body(self, version: int, segments: Sequence[SegmentRef]) -> dict[str, Any]:
        """The stored fields, with ``segments`` as given (all of them in format 1, those
        after the base in format 2)."""
        if self.committed_at is None:
            raise ValueError("committed_at must be set before serialising")
        return {
            "format_version": version,
            "job_fingerprint": self.job_fingerprint,
            "partition": self.partition,
            "epoch": self.epoch,
            "input_offset": self.input_offset,
            "pending": list(self.pending),
            "segments": [s.to_json() for s in segments],
            "watermark": self.watermark,
            "attempt": self.attempt,
            "committed_at": self.committed_at.isoformat(),
            "records_total": self.records_total,
            "stats": self.stats,
        }

    def to_json_bytes(self) -> bytes:
        """Serialise as a format-1 manifest with the embedded checksum (kept so format 1
        can still be written by tests of its reader); raises if pending/stats are not JSON."""
        return seal(self.body(MANIFEST_FORMAT, self.segments))

    @classmethod
    def from_json_bytes(cls, data: bytes) -> Manifest:
        """Parse and verify a stored format-1 manifest; any defect raises ManifestError."""
        document = unseal(data, "manifest", MANIFEST_FORMAT)
        if set(document) != BODY_KEYS:
            raise ManifestError(f"unexpected keys {sorted(set(document) ^ BODY_KEYS)}")
        return cls.from_body(document)

    @classmethod
    def from_body(cls, document: Mapping[str, Any]) -> Manifest:
        """The manifest of a verified body (its ``segments`` as stored)."""
        try:
            return cls(
                job_fingerprint=document["job_fingerprint"],
                partition=document["partition"],
                epoch=document["epoch"],
                input_offset=document["input_offset"],
                attempt=document["attempt"],
                pending=document["pending"],
                segments=[SegmentRef(**s) for s in document["segments"]],
                watermark=document["watermark"],
                records_total=document["records_total"],
                stats=document["stats"],
                committed_at=datetime.fromisoformat(document["committed_at"]),
            )
        except (TypeError, ValueError) as exc:
            raise ManifestError(f"invalid content ({exc})") from exc
