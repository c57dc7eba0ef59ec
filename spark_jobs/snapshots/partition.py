"""Snapshots of one partition: commit cuts, restore the best one, clean up.

Layout under the partition directory (``.../part-00007/``), format 2::

    commits/commit-<offset:012d>-<epoch:08d>-<attempt>-<uuid8>.snap   the commit points
    segments/<kind>-<attempt>-<uuid32>.arrow                            compacted rows

A commit file carries its cut's rows inline and names its base commit (``commit_file.py``);
a base lists every segment. Format 1 (``manifests/manifest-<epoch>-<attempt>-<uuid8>.json``,
one self-contained manifest per cut) is still read, so a namespace written by an earlier
version resumes; its partitions continue in format 2.

Every attempt writes only files whose names contain its attempt id and a fresh uuid, so
concurrent attempts (speculation, zombie retries) never overwrite each other.  Readers
only trust what a verified commit references; everything else is ignored.
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
from .commit_file import encode_commit
from .compat.format1 import SegmentChecker, manifest_names, valid_manifests
from .documents import ManifestError
from .manifest import Manifest, SegmentRef
from .paths import MANIFESTS_DIR, SEGMENTS_DIR, basename, commit_path, segment_path
from .reader import CommitReader, read_range
from .segments import decode_segment, encode_table, sha256_hex
from .storage import list_files_recursive, modified_at, write_atomically, write_new_file
from .writer import CHECKPOINT_INTERVAL, PartitionWriter

logger = logging.getLogger(__name__)

DEFAULT_GRACE = timedelta(minutes=10)


class PartitionSnapshots:
    """Snapshot access for one partition of one task run.

    Holds nothing but its location, so instances are cheap, picklable, and safe to use
    from several threads (e.g. ``asyncio.to_thread(part.commit, manifest)``).  No locks
    are taken; isolation between writers comes from unique file names. The stateful
    per-attempt writer of a running task comes from :meth:`writer`.
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

    def writer(
        self, attempt: str, checkpoint_interval: int = CHECKPOINT_INTERVAL
    ) -> PartitionWriter:
        """The writer of one attempt's cuts: constant cost per cut (see ``writer.py``)."""
        return PartitionWriter(self._fs, self.path, attempt, checkpoint_interval)

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
        """Atomically publish ``manifest`` as a self-contained (base) commit; returns it
        with ``committed_at`` set. Its cost grows with its segments: a running task
        commits through :meth:`writer` instead.

        Refuses manifests of another partition and manifests whose segments are not all
        present with the recorded size, so a caller bug fails here and not at restore.
        """
        if manifest.partition != self.partition:
            raise ValueError(
                f"manifest is for partition {manifest.partition}, not {self.partition}"
            )
        committed = dataclasses.replace(manifest, committed_at=datetime.now(UTC))
        problem = self._missing(committed)
        if problem is not None:
            raise ValueError(f"cannot commit epoch {manifest.epoch} of {self.path}: {problem}")
        path = commit_path(committed.input_offset, committed.epoch, committed.attempt, _token())
        data, _ = encode_commit(committed, path, None, committed.segments, ())
        directory, name = path.rsplit("/", 1)
        write_atomically(self._fs, f"{self.path}/{directory}", name, data)
        logger.debug("committed snapshot %s/%s", self.path, path)
        return committed

    def latest(self, *, verify_content: bool = True) -> Manifest | None:
        """The valid manifest with the most progress, or None when there is none.

        Reads one listing, the best commit and its base (more only when one does not
        verify). With ``verify_content`` every referenced segment is downloaded and its
        sha256 checked (each at most once); without it only presence and size are
        checked, which is what cheap progress reports use.
        """
        valid, _ = self._valid(limit=1, verify_content=verify_content)
        return valid[0][1] if valid else None

    def read_segments(self, manifest: Manifest) -> Iterator[tuple[str, pa.Table]]:
        """Yield ``(kind, table)`` for each segment of ``manifest``, in commit order, one
        read at a time (a replay never holds more than one segment).

        Verifies every segment again while reading and raises ManifestError if one has
        changed since :meth:`latest` accepted the manifest.
        """
        if manifest.partition != self.partition:
            raise ValueError(
                f"manifest is for partition {manifest.partition}, not {self.partition}"
            )
        for ref in manifest.segments:
            try:
                data = read_range(self._fs, self.path, ref)
            except FileNotFoundError as exc:
                raise ManifestError(f"segment {ref.path} of {self.path} is missing") from exc
            yield ref.kind, decode_segment(data, ref)

    def clean_unreferenced(
        self, *, keep_manifests: int = 2, grace: timedelta = DEFAULT_GRACE
    ) -> list[str]:
        """Delete files not referenced by the ``keep_manifests`` best valid commits.

        Reads those commits and their bases and one recursive listing, never a segment.
        Only files last modified more than ``grace`` ago are deleted, so segments and
        commits of an attempt that is still running survive; ``grace`` must exceed the
        time between writing a segment and committing it, plus any clock skew between
        this host and the storage.  Returns the deleted paths, relative to the partition
        directory.
        """
        if keep_manifests < 1:
            raise ValueError(f"keep_manifests must be >= 1, got {keep_manifests}")
        kept, newer = self._valid(limit=keep_manifests, verify_content=False)
        if newer:
            logger.warning(
                "not cleaning %s: %d commits of a newer format (e.g. %s)",
                self.path,
                len(newer),
                newer[0],
            )
            return []
        referenced = {path for _, _, needs in kept for path in needs}
        return self._delete_unreferenced(referenced, datetime.now(UTC) - grace)

    def has_manifest_files(self) -> bool:
        """Whether any commit or manifest was written here (valid or not): a partition
        with files but no valid one is corrupt, one with none has not committed yet."""
        return bool(CommitReader(self._fs, self.path, self.partition).names()) or bool(
            manifest_names(self._fs, self.path)
        )

    def _valid(
        self, *, limit: int, verify_content: bool
    ) -> tuple[list[tuple[str, Manifest, frozenset[str]]], list[str]]:
        """Up to ``limit`` (path, manifest, the files it needs) that verify, best first,
        and the files of a newer format; paths are relative to the partition. Format 1 is
        read only when no format-2 commit verifies (a namespace of an earlier version)."""
        reader = CommitReader(self._fs, self.path, self.partition)
        valid = reader.valid(limit=limit, verify_content=verify_content)
        if valid or reader.newer:
            return [(name, m, reader.needs(name, m)) for name, m in valid], reader.newer
        legacy, newer = valid_manifests(
            self._fs, self.path, self.partition, limit=limit, verify_content=verify_content
        )
        return [
            (f"{MANIFESTS_DIR}/{name}", m, _needs(f"{MANIFESTS_DIR}/{name}", m))
            for name, m in legacy
        ], newer

    def _missing(self, manifest: Manifest) -> str | None:
        """Why a segment of ``manifest`` is not there with its recorded size, or None."""
        files = [ref for ref in manifest.segments if not ref.inline]
        inline = [ref for ref in manifest.segments if ref.inline]
        if files:
            checker = SegmentChecker(self._fs, self.path, verify_content=False)
            problem = checker.problem(dataclasses.replace(manifest, segments=files))
            if problem is not None:
                return problem
        sizes = CommitReader(self._fs, self.path, self.partition).sizes if inline else {}
        for ref in inline:
            if sizes.get(ref.path, -1) < ref.offset + ref.size:
                return f"segment {ref.path} is missing"
        return None

    def _delete_unreferenced(self, referenced: set[str], cutoff: datetime) -> list[str]:
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


def _needs(path: str, manifest: Manifest) -> frozenset[str]:
    return frozenset({path, *(ref.path for ref in manifest.segments)})


def _token() -> str:
    return uuid.uuid4().hex[:8]
