"""Reading format 1: a self-contained manifest per cut under ``manifests/``.

Format 1 wrote every manifest whole and never pruned them, so its reader lists and parses
all of them (its cost grows with the cuts it finds). It is kept so a namespace written by
an earlier version is still resumed: the first format-2 commit of a resumed partition is
a base that lists every segment, and from then on only format 2 is read.
"""

from __future__ import annotations

import logging

from fsspec import AbstractFileSystem

from ..documents import MAX_DOCUMENT_BYTES, ManifestError, NewerFormatError
from ..manifest import Manifest, SegmentRef
from ..paths import MANIFEST_NAME, MANIFESTS_DIR, SEGMENTS_DIR, basename, encode_component
from ..segments import decode_segment
from ..storage import list_entries

logger = logging.getLogger(__name__)


class SegmentChecker:
    """Verifies each segment file at most once per call: candidate manifests share most
    segments. Lives for one call only, so no state is shared between threads or over time.
    """

    def __init__(self, fs: AbstractFileSystem, path: str, *, verify_content: bool) -> None:
        self._fs = fs
        self._path = path
        self._verify_content = verify_content
        self._sizes = {
            f"{SEGMENTS_DIR}/{basename(e['name'])}": e["size"]
            for e in list_entries(fs, f"{path}/{SEGMENTS_DIR}")
            if e.get("type") == "file"
        }
        self._problems: dict[str, str | None] = {}

    def problem(self, manifest: Manifest) -> str | None:
        """Why ``manifest`` is unusable, or None when all its segments check out."""
        for ref in manifest.segments:
            if ref.path not in self._problems:
                self._problems[ref.path] = self._check(ref)
            if self._problems[ref.path] is not None:
                return self._problems[ref.path]
        return None

    def _check(self, ref: SegmentRef) -> str | None:
        size = self._sizes.get(ref.path)
        if size is None:
            return f"segment {ref.path} is missing"
        if size != ref.size:
            return f"segment {ref.path}: size {size} != expected {ref.size}"
        if not self._verify_content:
            return None
        try:
            decode_segment(self._fs.cat_file(f"{self._path}/{ref.path}"), ref)
        except FileNotFoundError:
            return f"segment {ref.path} is missing"
        except ManifestError as exc:
            return str(exc)
        return None


def manifest_names(fs: AbstractFileSystem, path: str) -> list[str]:
    """Paths of the format-1 manifest files of the partition directory ``path``."""
    return list(_manifest_sizes(fs, path))


def _manifest_sizes(fs: AbstractFileSystem, path: str) -> dict[str, int | None]:
    return {
        entry["name"]: entry.get("size")
        for entry in list_entries(fs, f"{path}/{MANIFESTS_DIR}")
        if entry.get("type") == "file" and MANIFEST_NAME.fullmatch(basename(entry["name"]))
    }


def valid_manifests(
    fs: AbstractFileSystem, path: str, partition: int, *, limit: int, verify_content: bool
) -> tuple[list[tuple[str, Manifest]], list[str]]:
    """Up to ``limit`` (file name, manifest) pairs that fully verify, best first, and the
    paths of newer-format manifests."""
    candidates, newer = _candidates(fs, path, partition)
    # Segments are listed after the manifests: every segment of a manifest that was in
    # the first listing already exists, so a concurrent commit cannot look dangling.
    checker = SegmentChecker(fs, path, verify_content=verify_content)
    valid = []
    for name, manifest in candidates:
        problem = checker.problem(manifest)
        if problem is not None:
            logger.warning(
                "ignoring snapshot manifest %s/%s/%s: %s", path, MANIFESTS_DIR, name, problem
            )
            continue
        valid.append((name, manifest))
        if len(valid) == limit:
            break
    return valid, newer


def _candidates(
    fs: AbstractFileSystem, path: str, partition: int
) -> tuple[list[tuple[str, Manifest]], list[str]]:
    """Manifests whose own checksum verifies, best progress first, and the paths of
    manifests written in a newer format."""
    paths = []
    for name, size in _manifest_sizes(fs, path).items():
        if isinstance(size, int) and size <= MAX_DOCUMENT_BYTES:
            paths.append(name)
        else:  # refused unread: the reader's limit, as the writer kept it
            logger.warning("ignoring snapshot manifest %s: %s bytes, over the limit", name, size)
    contents = fs.cat(paths, on_error="return") if paths else {}
    candidates = []
    newer = []
    for name, content in contents.items():
        if isinstance(content, FileNotFoundError):
            continue  # deleted by a concurrent cleaner since the listing
        if isinstance(content, BaseException):
            raise content
        try:
            manifest = _parse(name, content, partition)
        except ManifestError as exc:
            logger.warning("ignoring snapshot manifest %s: %s", name, exc)
            if isinstance(exc, NewerFormatError):
                newer.append(name)
            continue
        candidates.append((basename(name), manifest))
    candidates.sort(key=lambda item: (item[1].progress_key(), item[0]), reverse=True)
    return candidates, newer


def _parse(path: str, content: bytes, partition: int) -> Manifest:
    """Verify a manifest and that it is where its content says it belongs."""
    manifest = Manifest.from_json_bytes(content)
    match = MANIFEST_NAME.fullmatch(basename(path))
    if match is None:
        raise ManifestError("not a manifest file name")
    if manifest.partition != partition:
        raise ManifestError(f"belongs to partition {manifest.partition}")
    if manifest.epoch != int(match.group(1)):
        raise ManifestError(f"epoch {manifest.epoch} does not match the file name")
    if encode_component("attempt", manifest.attempt) != match.group(2):
        raise ManifestError(f"attempt {manifest.attempt!r} does not match the file name")
    return manifest
