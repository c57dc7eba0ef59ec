"""Finding a partition's best format-2 commit: one listing, then one commit and its base.

Progress is in the commit file names (input offset, then epoch), so a reader orders the
candidates from one listing of ``commits/`` and reads the best one, then the base it
names: two metadata objects, however many cuts came before. Only when a commit does not
verify (torn, tampered, a missing base or segment) does it read the next one. Commits
with equal progress (two attempts at the same point) are all read and ordered by commit
time, as format 1 did.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging

from fsspec import AbstractFileSystem

from .commit_file import MAX_COMMIT_BYTES, FileRef, decode_commit
from .documents import ManifestError, NewerFormatError
from .manifest import Manifest, SegmentRef
from .paths import COMMIT_NAME, COMMITS_DIR, SEGMENTS_DIR, basename
from .segments import decode_segment, sha256_hex
from .storage import list_entries

logger = logging.getLogger(__name__)


class CommitReader:
    """One call's view of a partition's commits; its caches live for that call only, so
    nothing is shared between threads or over time."""

    def __init__(self, fs: AbstractFileSystem, path: str, partition: int) -> None:
        self._fs, self._path, self._partition = fs, path, partition
        self.sizes = {
            f"{COMMITS_DIR}/{basename(e['name'])}": e["size"]
            for e in list_entries(fs, f"{path}/{COMMITS_DIR}")
            if e.get("type") == "file"
        }
        self._segment_sizes: dict[str, int] | None = None
        self._bases: dict[FileRef, Manifest | str] = {}
        self._base_of: dict[str, str] = {}
        self._checked: dict[tuple[str, int], str | None] = {}
        self.newer: list[str] = []

    def names(self) -> list[str]:
        """Commit paths, most progress (input offset, then epoch) first."""
        keyed = []
        for name in self.sizes:
            match = COMMIT_NAME.fullmatch(basename(name))
            if match is not None:
                keyed.append(((int(match.group(1)), int(match.group(2))), name))
        return [name for _, name in sorted(keyed, reverse=True)]

    def valid(self, *, limit: int, verify_content: bool) -> list[tuple[str, Manifest]]:
        """Up to ``limit`` (commit path, full manifest) pairs that verify, best first."""
        found: list[tuple[str, Manifest]] = []
        groups = itertools.groupby(self.names(), key=lambda name: basename(name).split("-")[1:3])
        for _, group in groups:
            loaded = [(name, self._load(name)) for name in group]
            ordered = sorted(
                ((name, m) for name, m in loaded if m is not None),
                key=lambda item: (item[1].progress_key(), item[0]),
                reverse=True,
            )
            for name, manifest in ordered:
                problem = self._problem(manifest, verify_content)
                if problem is not None:
                    logger.warning("ignoring snapshot commit %s/%s: %s", self._path, name, problem)
                    continue
                found.append((name, manifest))
                if len(found) == limit:
                    return found
        return found

    def needs(self, name: str, manifest: Manifest) -> frozenset[str]:
        """The files commit ``name`` (loaded here as ``manifest``) needs: itself, its base
        and its segments."""
        base = self._base_of.get(name)
        return frozenset(
            {name, *(ref.path for ref in manifest.segments), *([base] if base else [])}
        )

    def _load(self, name: str) -> Manifest | None:
        """The full manifest of commit ``name`` (base and own segments), or None."""
        try:
            data = read_commit(self._fs, f"{self._path}/{name}", self.sizes.get(name))
            stored = decode_commit(data, name, self._partition)
            if stored.base is None:
                return stored.manifest
            self._base_of[name] = stored.base.path
            base = self._base(stored.base)
            segments = (*base.segments, *stored.manifest.segments)
            return dataclasses.replace(stored.manifest, segments=segments)
        except FileNotFoundError:
            return None  # deleted by the writer or a cleaner since the listing
        except (ManifestError, ValueError) as exc:
            logger.warning("ignoring snapshot commit %s/%s: %s", self._path, name, exc)
            if isinstance(exc, NewerFormatError):
                self.newer.append(name)
            return None

    def _base(self, ref: FileRef) -> Manifest:
        """The self-contained commit ``ref`` names, checked against its size and sha256."""
        if ref not in self._bases:
            try:
                data = read_commit(self._fs, f"{self._path}/{ref.path}", self.sizes.get(ref.path))
            except FileNotFoundError:
                data = None
            if data is None:
                self._bases[ref] = f"base {ref.path} is missing"
            elif len(data) != ref.size or sha256_hex(data) != ref.sha256:
                self._bases[ref] = f"base {ref.path} does not match its size and sha256"
            else:
                stored = decode_commit(data, ref.path, self._partition)
                if stored.base is not None:
                    raise ManifestError(f"base {ref.path} is not self-contained")
                self._bases[ref] = stored.manifest
        found = self._bases[ref]
        if isinstance(found, str):
            raise ManifestError(found)
        return found

    def _problem(self, manifest: Manifest, verify_content: bool) -> str | None:
        """Why a segment of ``manifest`` is unusable, or None: presence and size from the
        listings; with ``verify_content`` each segment's sha256 too (each at most once)."""
        for ref in manifest.segments:
            key = (ref.path, ref.offset)
            if key not in self._checked:
                self._checked[key] = self._check(ref, verify_content)
            if self._checked[key] is not None:
                return self._checked[key]
        return None

    def _check(self, ref: SegmentRef, verify_content: bool) -> str | None:
        size = (self.sizes if ref.inline else self._segments()).get(ref.path)
        if size is None:
            return f"segment {ref.path} is missing"
        if size < ref.offset + ref.size or (not ref.inline and size != ref.size):
            return f"segment {ref.path}: size {size} does not hold the expected {ref.size}"
        if not verify_content:
            return None
        try:
            decode_segment(read_range(self._fs, self._path, ref), ref)
        except FileNotFoundError:
            return f"segment {ref.path} is missing"
        except ManifestError as exc:
            return str(exc)
        return None

    def _segments(self) -> dict[str, int]:
        """Sizes of the segment files, listed once and only when a commit names one."""
        if self._segment_sizes is None:
            self._segment_sizes = {
                f"{SEGMENTS_DIR}/{basename(e['name'])}": e["size"]
                for e in list_entries(self._fs, f"{self._path}/{SEGMENTS_DIR}")
                if e.get("type") == "file"
            }
        return self._segment_sizes


def read_commit(fs: AbstractFileSystem, path: str, size: int | None) -> bytes:
    """A whole commit file, refused unread when its ``size`` in the listing is over
    :data:`MAX_COMMIT_BYTES` (one whole-object GET otherwise, as the request counts of the
    format expect: the listing was taken just before); not listed is missing."""
    if size is None:
        raise FileNotFoundError(path)
    if size > MAX_COMMIT_BYTES:
        raise ManifestError(f"commit file of {size} bytes, over {MAX_COMMIT_BYTES}: not read")
    data: bytes = fs.cat_file(path)
    if len(data) > MAX_COMMIT_BYTES:  # replaced since the listing
        raise ManifestError(f"commit file over {MAX_COMMIT_BYTES} bytes")
    return data


def read_range(fs: AbstractFileSystem, path: str, ref: SegmentRef) -> bytes:
    """The bytes of ``ref`` under the partition directory ``path`` (a ranged read inline)."""
    full = f"{path}/{ref.path}"
    if not ref.inline:
        data: bytes = fs.cat_file(full)
        return data
    ranged: bytes = fs.cat_file(full, start=ref.offset, end=ref.offset + ref.size)
    return ranged
