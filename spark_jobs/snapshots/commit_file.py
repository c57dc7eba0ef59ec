"""Format 2 commit files: one cut's delta, its rows and its commit record, in one write.

``commits/commit-<input offset:012d>-<epoch:08d>-<attempt>-<token8>.snap``::

    [Arrow IPC file of the cut's results][... of its dead letters][header][footer]

The header is the manifest's sealed JSON (``format_version`` 2) with two changes:
``segments`` lists only what came after the *base*, this cut's inline rows last, and
``base`` names the self-contained commit file (``{path, sha256, size}``) whose own
``segments`` list everything before; a base has ``base: null``. The full segment list of
a commit is therefore its base's plus its own: two objects, however many cuts came
before. The footer is the header's length (8 bytes, big-endian) and a magic with the
format version, so the header is found from the end without parsing the rows.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .documents import (
    MAX_DOCUMENT_BYTES,
    ManifestError,
    NewerFormatError,
    is_sha256_hex,
    seal,
    unseal,
)
from .manifest import BODY_KEYS, FORMAT_VERSION, Manifest, SegmentRef
from .paths import COMMIT_NAME, COMMIT_PATH, basename, encode_component
from .segments import sha256_hex

#: The largest commit file a reader reads (checked from the listing, and by a bounded
#: read); the writer never writes a larger one (``oversized.py``). A commit holds one
#: cut's rows and a header of at most ``MAX_DOCUMENT_BYTES``.
MAX_COMMIT_BYTES = 256 * 2**20
_MAGIC = b"ENRSNAP"
_FOOTER = struct.Struct(f">Q{len(_MAGIC)}sB")
_HEADER_KEYS = BODY_KEYS | {"base"}


class CommitTooLargeError(ValueError):
    """A commit its reader would refuse: it is not written."""


@dataclass(frozen=True)
class FileRef:
    """A whole commit file, as a later commit names its base: checked by size and sha256."""

    path: str
    sha256: str
    size: int

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not COMMIT_PATH.fullmatch(self.path):
            raise ValueError(f"invalid base path {self.path!r}")
        if not is_sha256_hex(self.sha256):
            raise ValueError(f"base sha256 must be 64 lowercase hex digits: {self.sha256!r}")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 0:
            raise ValueError(f"base size must be an int >= 0, got {self.size!r}")

    @classmethod
    def of(cls, path: str, data: bytes) -> FileRef:
        return cls(path, sha256_hex(data), len(data))


@dataclass(frozen=True)
class StoredCommit:
    """A decoded commit file: its manifest with the segments *as stored* (after the base)."""

    manifest: Manifest
    base: FileRef | None


def encode_commit(
    manifest: Manifest,
    path: str,
    base: FileRef | None,
    earlier: Sequence[SegmentRef],
    blocks: Sequence[tuple[str, bytes, int]],
) -> tuple[bytes, list[SegmentRef]]:
    """The file for committed ``manifest`` at ``path``: ``blocks`` (kind, Arrow IPC bytes,
    rows) inline after ``earlier`` (the segments after ``base``); returns the file and the
    references to its inline rows."""
    refs, offset = [], 0
    for kind, data, rows in blocks:
        refs.append(SegmentRef(path, kind, rows, sha256_hex(data), len(data), offset=offset))
        offset += len(data)
    body: dict[str, Any] = manifest.body(FORMAT_VERSION, [*earlier, *refs])
    body["base"] = dataclasses.asdict(base) if base is not None else None
    header = seal(body)
    if len(header) > MAX_DOCUMENT_BYTES:  # never written: its reader would refuse it
        raise CommitTooLargeError(
            f"commit header of {len(header)} bytes is over the reader's limit of "
            f"{MAX_DOCUMENT_BYTES} (values held in the queue: see partition_runner/oversized.py)"
        )
    footer = _FOOTER.pack(len(header), _MAGIC, FORMAT_VERSION)
    return b"".join([*(data for _, data, _ in blocks), header, footer]), refs


def decode_commit(data: bytes, path: str, partition: int) -> StoredCommit:
    """Parse and verify the commit file ``path`` (relative to the partition directory):
    footer, sealed header, name against content, inline rows against their sha256.
    Any defect raises ManifestError; a newer format raises NewerFormatError."""
    if len(data) < _FOOTER.size:
        raise ManifestError("too short for a commit file")
    length, magic, version = _FOOTER.unpack(data[-_FOOTER.size :])
    if magic != _MAGIC:
        raise ManifestError("no commit footer")
    if version > FORMAT_VERSION:
        raise NewerFormatError(f"format_version {version} is newer than {FORMAT_VERSION}")
    rows_end = len(data) - _FOOTER.size - length
    if rows_end < 0:
        raise ManifestError(f"header length {length} is beyond the file")
    document = unseal(data[rows_end : -_FOOTER.size], "commit header", FORMAT_VERSION)
    if set(document) != _HEADER_KEYS:
        raise ManifestError(f"unexpected keys {sorted(set(document) ^ _HEADER_KEYS)}")
    manifest = Manifest.from_body(document)
    base = _base(document["base"])
    _check_name(manifest, path, partition)
    for ref in manifest.segments:
        if ref.path == path:
            block = data[ref.offset : ref.offset + ref.size]
            if ref.offset + ref.size > rows_end or sha256_hex(block) != ref.sha256:
                raise ManifestError(f"inline rows at {ref.offset} do not match their sha256")
    return StoredCommit(manifest, base)


def _base(document: Mapping[str, Any] | None) -> FileRef | None:
    if document is None:
        return None
    try:
        return FileRef(**document)
    except (TypeError, ValueError) as exc:
        raise ManifestError(f"invalid base ({exc})") from exc


def _check_name(manifest: Manifest, path: str, partition: int) -> None:
    """A commit must be where its content says it belongs: copied or renamed ones are not."""
    match = COMMIT_NAME.fullmatch(basename(path))
    if match is None or not COMMIT_PATH.fullmatch(path):
        raise ManifestError("not a commit file name")
    if manifest.partition != partition:
        raise ManifestError(f"belongs to partition {manifest.partition}")
    if manifest.input_offset != int(match.group(1)):
        raise ManifestError(f"input offset {manifest.input_offset} does not match the file name")
    if manifest.epoch != int(match.group(2)):
        raise ManifestError(f"epoch {manifest.epoch} does not match the file name")
    if encode_component("attempt", manifest.attempt) != match.group(3):
        raise ManifestError(f"attempt {manifest.attempt!r} does not match the file name")
