"""One attempt's writer of format-2 commits: constant-cost cuts, bounded metadata.

An ordinary cut writes one file, its commit (the cut's rows inline, then a header that
names the base and the segments since it): its cost does not depend on how many cuts came
before, and nothing earlier is listed, read or rewritten. Every
:data:`CHECKPOINT_INTERVAL` cuts (and at an attempt's first cut) the commit is a *base*
instead: the inline rows since the last base are folded into segment files and merged by
level (``compaction.py``), and the commit lists every segment itself. Readers need one
commit and its base, whatever k.

Superseded files are deleted during the run, in one request at each base cut: the files
of this writer that neither of its last two commits needs. Two, not one: a run that takes
over the namespace resumes from the newest commit it finds, which may be the one before a
commit still being written by the run it replaced (that run is fenced at its next check,
so it commits at most one more). Files this attempt did not write (inherited from the
commit it resumed, or another attempt's) are never deleted here: a concurrent attempt may
still build on them; ``clean_unreferenced`` removes them once no kept commit needs them.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import pyarrow as pa
from fsspec import AbstractFileSystem

from .commit_file import MAX_COMMIT_BYTES, FileRef, encode_commit
from .compaction import fold_inline, merge_levels
from .manifest import Manifest, SegmentRef
from .paths import basename, commit_path, segment_path
from .reader import read_range
from .segments import decode_segment, encode_table, sha256_hex
from .storage import write_atomically, write_new_file

logger = logging.getLogger(__name__)

#: Cuts from one base commit to the next (Delta Lake's ``checkpointInterval``): bounds the
#: inline rows a commit names (so its header) and the rows a base cut folds.
CHECKPOINT_INTERVAL = 32


@dataclasses.dataclass(frozen=True)
class _Base:
    """The writer's last base commit and the segments it lists."""

    ref: FileRef
    segments: tuple[SegmentRef, ...]


class PartitionWriter:
    """Commits the cuts of one attempt of one partition, each after the previous one.

    Not thread-safe: one cut at a time (the committer's single write in flight).
    """

    def __init__(
        self,
        fs: AbstractFileSystem,
        path: str,
        attempt: str,
        checkpoint_interval: int = CHECKPOINT_INTERVAL,
    ) -> None:
        if checkpoint_interval < 1:
            raise ValueError(f"checkpoint_interval must be >= 1, got {checkpoint_interval}")
        self._fs, self._path, self.attempt = fs, path, attempt
        self._interval = checkpoint_interval
        self._base: _Base | None = None
        self._since_base = 0
        self._blocks: dict[tuple[str, int], bytes] = {}  # own inline rows since the base
        self._recent: deque[frozenset[str]] = deque(maxlen=2)  # what the last two need
        self._own: set[str] = set()  # files written here and not deleted yet
        self.last_commit_bytes = 0  # what the last commit wrote: segments and the commit

    def commit(
        self,
        manifest: Manifest,
        new: Sequence[tuple[str, pa.Table]],
        before_commit: Callable[[], None] = lambda: None,
    ) -> Manifest:
        """Commit ``manifest`` (the next epoch, its segments those already committed)
        with the cut's ``new`` (kind, table) rows; returns it committed, with every
        segment. ``before_commit`` runs right before the commit is written (the lease
        check: a fenced-off run raises there and commits nothing)."""
        committed = dataclasses.replace(manifest, committed_at=datetime.now(UTC))
        self.last_commit_bytes = 0
        path = commit_path(manifest.input_offset, manifest.epoch, self.attempt, _token(8))
        base = self._base
        is_base = (
            base is None
            or self._since_base + 1 >= self._interval
            or manifest.segments[: len(base.segments)] != base.segments
        )
        if base is not None and not is_base:
            blocks = [(kind, encode_table(t), t.num_rows) for kind, t in new if t.num_rows]
            earlier = manifest.segments[len(base.segments) :]
            data, refs = encode_commit(committed, path, base.ref, earlier, blocks)
            segments = (*manifest.segments, *refs)
            # Rows too many to sit inline in a file its reader accepts: a base instead,
            # whose rows go to segment files (``MAX_COMMIT_BYTES``).
            is_base = len(data) > MAX_COMMIT_BYTES
            if not is_base:
                for ref, (_, block, _) in zip(refs, blocks, strict=True):
                    self._blocks[ref.path, ref.offset] = block
        if base is None or is_base:
            segments = tuple(self._compact(manifest.segments, new))
            data, _ = encode_commit(committed, path, None, segments, ())
        before_commit()
        directory, name = path.rsplit("/", 1)
        write_atomically(self._fs, f"{self._path}/{directory}", name, data)
        self.last_commit_bytes += len(data)
        self._own.add(path)
        self._advance(path, data, segments, is_base)
        return dataclasses.replace(committed, segments=segments)

    def _advance(
        self, path: str, data: bytes, segments: tuple[SegmentRef, ...], is_base: bool
    ) -> None:
        """Remember the commit just written; at a base, delete what is superseded."""
        needs = {path, *(ref.path for ref in segments)}
        if is_base or self._base is None:
            self._base = _Base(FileRef.of(path, data), segments)
            self._since_base = 0
            self._blocks.clear()
        else:
            needs.add(self._base.ref.path)
            self._since_base += 1
        self._recent.append(frozenset(needs))
        if is_base:
            self._delete_superseded()

    def _compact(
        self, segments: Sequence[SegmentRef], new: Sequence[tuple[str, pa.Table]]
    ) -> list[SegmentRef]:
        folded = fold_inline(segments, new, self._fetch, self._write_segment)
        return merge_levels(folded, self._fetch, self._write_segment)

    def _fetch(self, ref: SegmentRef) -> pa.Table:
        """A segment's rows: this writer's own inline rows from memory, others read back."""
        data = self._blocks.get((ref.path, ref.offset))
        if data is None:
            data = read_range(self._fs, self._path, ref)
        return decode_segment(data, ref)

    def _write_segment(self, kind: str, table: pa.Table, level: int) -> SegmentRef:
        relative = segment_path(kind, self.attempt, _token(32))
        data = encode_table(table)
        ref = SegmentRef(relative, kind, table.num_rows, sha256_hex(data), len(data), level=level)
        directory = relative.rsplit("/", 1)[0]
        write_new_file(self._fs, f"{self._path}/{directory}", basename(relative), data)
        self.last_commit_bytes += len(data)
        self._own.add(relative)
        return ref

    def _delete_superseded(self) -> None:
        """Delete, in one request, this writer's files that its last two commits do not need."""
        needed = frozenset().union(*self._recent)
        garbage = sorted(self._own - needed)
        if not garbage:
            return
        try:
            self._fs.rm([f"{self._path}/{relative}" for relative in garbage])
        except FileNotFoundError:
            pass  # a cleaner was faster; what is left goes at the next base
        except OSError as error:  # storage hiccup: the files stay until a later cleanup
            logger.warning("could not delete superseded snapshot files: %s", error)
            return
        self._own.difference_update(garbage)


def _token(length: int) -> str:
    return uuid.uuid4().hex[:length]
