"""Snapshots of one partition: write segments, commit manifests, restore, clean up.

Layout under the partition directory (``.../part-00007/``)::

    segments/<kind>-<attempt>-<uuid32>.arrow         immutable, written before the manifest
    manifests/manifest-<epoch:08d>-<attempt>-<uuid8>.json   the commit point

Every attempt writes only files whose names contain its attempt id and a fresh uuid, so
concurrent attempts (speculation, zombie retries) never overwrite each other.  Readers
only trust what a verified manifest references; everything else is ignored.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pyarrow as pa
from fsspec import AbstractFileSystem

from .attempt_counts import AttemptLedger
from .manifest import Manifest, ManifestError, NewerFormatError, SegmentRef
from .paths import (
    MANIFEST_NAME,
    MANIFESTS_DIR,
    SEGMENTS_DIR,
    basename,
    encode_component,
    manifest_name,
    segment_path,
)
from .segments import decode_segment, encode_table, sha256_hex
from .storage import (
    list_entries,
    list_files_recursive,
    modified_at,
    write_atomically,
    write_new_file,
)

logger = logging.getLogger(__name__)

DEFAULT_GRACE = timedelta(minutes=10)


class _SegmentChecker:
    """Verifies each segment at most once per call: candidate manifests share most segments.

    Lives for one call only, so no state is shared between threads or over time.
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


class PartitionSnapshots:
    """Snapshot access for one partition of one task run.

    Holds nothing but its location, so instances are cheap, picklable, and safe to use
    from several threads (e.g. ``asyncio.to_thread(part.commit, manifest)``).  No locks
    are taken; isolation between writers comes from unique file names.
    """

    def __init__(self, fs: AbstractFileSystem, path: str, partition: int) -> None:
        self._fs = fs
        self.path = path
        self.partition = partition

    def __repr__(self) -> str:
        return f"PartitionSnapshots({self.path!r})"

    def attempt_ledger(self) -> AttemptLedger:
        """The attempt records of this partition's namespace (its parent directory)."""
        return AttemptLedger(self._fs, self.path.rsplit("/", 1)[0])

    def write_segment(self, table: pa.Table, *, kind: str, attempt: str) -> SegmentRef:
        """Durably write ``table`` as a new immutable segment; commit a manifest to publish it.

        ``kind`` is "results" or "dead_letters".  Nothing is locked: the name is unique.
        """
        relative = segment_path(kind, attempt, uuid.uuid4().hex)
        data = encode_table(table)
        ref = SegmentRef(
            path=relative, kind=kind, rows=table.num_rows, sha256=sha256_hex(data), size=len(data)
        )
        write_new_file(self._fs, f"{self.path}/{SEGMENTS_DIR}", basename(relative), data)
        return ref

    def commit(self, manifest: Manifest) -> Manifest:
        """Atomically publish ``manifest``; returns it with ``committed_at`` set.

        Refuses manifests of another partition and manifests whose segments are not all
        present with the recorded size, so a caller bug fails here and not at restore.
        """
        if manifest.partition != self.partition:
            raise ValueError(
                f"manifest is for partition {manifest.partition}, not {self.partition}"
            )
        committed = dataclasses.replace(manifest, committed_at=datetime.now(UTC))
        data = committed.to_json_bytes()
        problem = _SegmentChecker(self._fs, self.path, verify_content=False).problem(committed)
        if problem is not None:
            raise ValueError(f"cannot commit epoch {manifest.epoch} of {self.path}: {problem}")
        name = manifest_name(committed.epoch, committed.attempt, uuid.uuid4().hex[:8])
        write_atomically(self._fs, f"{self.path}/{MANIFESTS_DIR}", name, data)
        logger.debug("committed snapshot %s/%s/%s", self.path, MANIFESTS_DIR, name)
        return committed

    def latest(self, *, verify_content: bool = True) -> Manifest | None:
        """The valid manifest with the most progress, or None when there is none.

        With ``verify_content`` every referenced segment is downloaded and its sha256
        checked (each at most once); without it only presence and size are checked,
        which is what cheap progress reports use.
        """
        valid, _ = self._valid_manifests(limit=1, verify_content=verify_content)
        return valid[0][1] if valid else None

    def read_segments(self, manifest: Manifest) -> Iterator[tuple[str, pa.Table]]:
        """Yield ``(kind, table)`` for each segment of ``manifest``, in commit order.

        Verifies every segment again while reading and raises ManifestError if one has
        changed since :meth:`latest` accepted the manifest.
        """
        if manifest.partition != self.partition:
            raise ValueError(
                f"manifest is for partition {manifest.partition}, not {self.partition}"
            )
        for ref in manifest.segments:
            try:
                data = self._fs.cat_file(f"{self.path}/{ref.path}")
            except FileNotFoundError as exc:
                raise ManifestError(f"segment {ref.path} of {self.path} is missing") from exc
            yield ref.kind, decode_segment(data, ref)

    def clean_unreferenced(
        self, *, keep_manifests: int = 2, grace: timedelta = DEFAULT_GRACE
    ) -> list[str]:
        """Delete files not referenced by the ``keep_manifests`` best valid manifests.

        Only files last modified more than ``grace`` ago are deleted, so segments and
        temporary manifests of an attempt that is still running survive; ``grace`` must
        exceed the time between writing a segment and committing its manifest, plus any
        clock skew between this host and the storage.  Returns the deleted paths,
        relative to the partition directory.
        """
        if keep_manifests < 1:
            raise ValueError(f"keep_manifests must be >= 1, got {keep_manifests}")
        kept, newer = self._valid_manifests(limit=keep_manifests, verify_content=True)
        if newer:
            logger.warning(
                "not cleaning %s: %d manifests of a newer format (e.g. %s)",
                self.path,
                len(newer),
                newer[0],
            )
            return []
        referenced = {f"{MANIFESTS_DIR}/{name}" for name, _ in kept}
        referenced.update(ref.path for _, manifest in kept for ref in manifest.segments)
        cutoff = datetime.now(UTC) - grace
        deleted = []
        for info in list_files_recursive(self._fs, self.path):
            relative = info["name"][len(self.path) + 1 :]
            if relative in referenced:
                continue
            mtime = modified_at(self._fs, info)
            if mtime is None or mtime > cutoff:
                continue
            try:
                self._fs.rm_file(info["name"])
            except FileNotFoundError:
                continue  # another cleaner was faster
            deleted.append(relative)
        if deleted:
            logger.info("removed %d unreferenced snapshot files under %s", len(deleted), self.path)
        return sorted(deleted)

    def has_manifest_files(self) -> bool:
        """Whether any manifest was written here (valid or not): a partition with files
        but no valid manifest is corrupt, one with none has simply not committed yet."""
        directory = f"{self.path}/{MANIFESTS_DIR}"
        return any(
            MANIFEST_NAME.fullmatch(basename(entry["name"]))
            for entry in list_entries(self._fs, directory)
        )

    def _candidates(self) -> tuple[list[tuple[str, Manifest]], list[str]]:
        """Manifests whose own checksum verifies, best progress first, and the paths of
        manifests written in a newer format."""
        directory = f"{self.path}/{MANIFESTS_DIR}"
        paths = [
            entry["name"]
            for entry in list_entries(self._fs, directory)
            if entry.get("type") == "file" and MANIFEST_NAME.fullmatch(basename(entry["name"]))
        ]
        contents = self._fs.cat(paths, on_error="return") if paths else {}
        candidates = []
        newer = []
        for path, content in contents.items():
            if isinstance(content, FileNotFoundError):
                continue  # deleted by a concurrent cleaner since the listing
            if isinstance(content, BaseException):
                raise content
            try:
                manifest = self._parse(path, content)
            except ManifestError as exc:
                logger.warning("ignoring snapshot manifest %s: %s", path, exc)
                if isinstance(exc, NewerFormatError):
                    newer.append(path)
                continue
            candidates.append((basename(path), manifest))
        candidates.sort(key=lambda item: (item[1].progress_key(), item[0]), reverse=True)
        return candidates, newer

    def _parse(self, path: str, content: bytes) -> Manifest:
        """Verify a manifest and that it is where its content says it belongs."""
        manifest = Manifest.from_json_bytes(content)
        match = MANIFEST_NAME.fullmatch(basename(path))
        if match is None:
            raise ManifestError("not a manifest file name")
        if manifest.partition != self.partition:
            raise ManifestError(f"belongs to partition {manifest.partition}")
        if manifest.epoch != int(match.group(1)):
            raise ManifestError(f"epoch {manifest.epoch} does not match the file name")
        if encode_component("attempt", manifest.attempt) != match.group(2):
            raise ManifestError(f"attempt {manifest.attempt!r} does not match the file name")
        return manifest

    def _valid_manifests(
        self, *, limit: int, verify_content: bool
    ) -> tuple[list[tuple[str, Manifest]], list[str]]:
        """Up to ``limit`` (file name, manifest) pairs that fully verify, best first, and
        the paths of newer-format manifests."""
        candidates, newer = self._candidates()
        # Segments are listed after the manifests: every segment of a manifest that was in
        # the first listing already exists, so a concurrent commit cannot look dangling.
        checker = _SegmentChecker(self._fs, self.path, verify_content=verify_content)
        valid = []
        for name, manifest in candidates:
            problem = checker.problem(manifest)
            if problem is not None:
                logger.warning(
                    "ignoring snapshot manifest %s/%s/%s: %s",
                    self.path,
                    MANIFESTS_DIR,
                    name,
                    problem,
                )
                continue
            valid.append((name, manifest))
            if len(valid) == limit:
                break
        return valid, newer
