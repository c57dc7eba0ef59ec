"""The manifest: the one small, checksummed, self-contained record of a partition's progress.

A manifest lists *every* segment committed so far (inherited ones included), so restoring
needs exactly one manifest and never a chain of them.  Its JSON carries a sha256 of its own
canonical body (``manifest_sha256``) and the sha256 of every segment, so a torn write, a
bit flip or a truncated upload is detected on read and the reader can fall back to an
older manifest instead of resuming from garbage.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .paths import SEGMENT_PATH, encode_component

FORMAT_VERSION = 1
SEGMENT_KINDS = ("results", "dead_letters")
CHECKSUM_KEY = "manifest_sha256"
_SHA256_HEX_LENGTH = 64
_BODY_KEYS = frozenset(
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


class ManifestError(ValueError):
    """A stored manifest, or a segment it references, is unreadable, inconsistent or corrupt."""


#: Larger stored JSON is refused unread: a manifest holds small integers and the values of
#: at most a queue's worth of pending records.
MAX_DOCUMENT_BYTES = 64 * 2**20


def parse_stored_json(data: bytes, what: str) -> Any:
    """JSON a run wrote and anyone with write access could have crafted: too large, NaN or
    Infinity, an integer beyond Python's digit limit or nesting deep enough to exhaust the
    stack all raise :class:`ManifestError`, which readers treat as corrupt."""
    if len(data) > MAX_DOCUMENT_BYTES:
        raise ManifestError(f"{what} is {len(data)} bytes, over {MAX_DOCUMENT_BYTES}")
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_no_constants)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ManifestError(f"{what} is not valid JSON ({type(exc).__name__}: {exc})") from None


def _no_constants(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


class NewerFormatError(ManifestError):
    """Written by a newer version of this package (rolling upgrade).

    Not corruption: readers skip such manifests, but cleanup must not delete anything,
    since it cannot tell which files they reference.
    """


def _int(name: str, value: object, *, minimum: int | None = 0, optional: bool = False) -> None:
    if value is None and optional:
        return
    # bool is an int subclass; True as an offset is always a bug.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def _is_sha256_hex(value: object) -> bool:
    return (
        isinstance(value, str)
        and len(value) == _SHA256_HEX_LENGTH
        and all(c in "0123456789abcdef" for c in value)
    )


def _canonical(body: Mapping[str, Any]) -> str:
    """Deterministic JSON so the checksum survives a load/dump round trip."""
    return json.dumps(
        body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    )


@dataclass(frozen=True)
class SegmentRef:
    """An immutable Arrow IPC file of the partition, as referenced by manifests.

    ``path`` is relative to the partition directory and must have the exact shape this
    package writes, so a manifest can never point a reader outside its partition.
    ``size`` (bytes) lets cheap checks detect missing or truncated files from a listing.
    """

    path: str
    kind: str
    rows: int
    sha256: str
    size: int

    def __post_init__(self) -> None:
        if self.kind not in SEGMENT_KINDS:
            raise ValueError(f"segment kind must be one of {SEGMENT_KINDS}, got {self.kind!r}")
        if not isinstance(self.path, str) or not SEGMENT_PATH.fullmatch(self.path):
            raise ValueError(f"invalid segment path {self.path!r}")
        if not self.path.startswith(f"segments/{self.kind}-"):
            raise ValueError(f"segment path {self.path!r} does not match kind {self.kind!r}")
        _int("segment rows", self.rows)
        _int("segment size", self.size)
        if not _is_sha256_hex(self.sha256):
            raise ValueError(f"segment sha256 must be 64 lowercase hex digits: {self.sha256!r}")

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
        if len({s.path for s in self.segments}) != len(self.segments):
            raise ValueError("a segment is listed twice")
        if not all(isinstance(k, str) for k in self.stats):
            raise ValueError("stats keys must be str")
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

    def to_json_bytes(self) -> bytes:
        """Serialise with the embedded checksum; raises if pending/stats are not JSON."""
        if self.committed_at is None:
            raise ValueError("committed_at must be set before serialising")
        body = {
            "format_version": FORMAT_VERSION,
            "job_fingerprint": self.job_fingerprint,
            "partition": self.partition,
            "epoch": self.epoch,
            "input_offset": self.input_offset,
            "pending": list(self.pending),
            "segments": [s.to_json() for s in self.segments],
            "watermark": self.watermark,
            "attempt": self.attempt,
            "committed_at": self.committed_at.isoformat(),
            "records_total": self.records_total,
            "stats": self.stats,
        }
        try:
            checksum = hashlib.sha256(_canonical(body).encode("ascii")).hexdigest()
        except (TypeError, ValueError) as exc:
            raise TypeError(f"manifest pending/stats must be JSON-serialisable: {exc}") from exc
        return (_canonical({**body, CHECKSUM_KEY: checksum}) + "\n").encode("ascii")

    @classmethod
    def from_json_bytes(cls, data: bytes) -> Manifest:
        """Parse and verify a stored manifest; any defect raises :class:`ManifestError`."""
        document = parse_stored_json(data, "manifest")
        if not isinstance(document, dict):
            raise ManifestError("not a JSON object")
        # Checked before the checksum: a newer format may checksum differently.
        version = document.get("format_version")
        if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
            raise NewerFormatError(f"format_version {version} is newer than {FORMAT_VERSION}")
        stored = document.pop(CHECKSUM_KEY, None)
        if not _is_sha256_hex(stored):
            raise ManifestError(f"missing or malformed {CHECKSUM_KEY}")
        try:
            actual = hashlib.sha256(_canonical(document).encode("ascii")).hexdigest()
        except (ValueError, RecursionError) as exc:
            raise ManifestError(f"cannot checksum ({type(exc).__name__})") from None
        if actual != stored:
            raise ManifestError(f"checksum mismatch (stored {stored}, computed {actual})")
        if version != FORMAT_VERSION:
            raise ManifestError(f"unsupported format_version {version!r}")
        if set(document) != _BODY_KEYS:
            raise ManifestError(f"unexpected keys {sorted(set(document) ^ _BODY_KEYS)}")
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
