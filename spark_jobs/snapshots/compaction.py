"""Compaction: a partition's segments stay few however many cuts it commits.

Between two bases every cut carries its rows inline in its commit file. At a base cut the
writer folds those inline rows (and the cut's own) into one level-0 segment file per kind,
and then, like an LSM tree's size tiers, merges the last :data:`MERGE_FACTOR` segments of a
kind into one of the next level whenever they share a level and together stay under
:data:`MAX_SEGMENT_BYTES`. A partition of k cuts thus holds at most ``MERGE_FACTOR - 1``
segments per level and kind, ``log(k / checkpoint interval)`` levels, plus the segments
that reached the size cap (their number grows with the bytes committed, not with k).
Each row is rewritten once per level; within a kind, rows keep their commit order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pyarrow as pa

from .manifest import SEGMENT_KINDS, SegmentRef

#: Segments of one level merged into one of the next level.
MERGE_FACTOR = 8
#: Merges that would exceed this many bytes (compressed) are not made: a merge is built in
#: memory, so this bounds the writer's memory as well as the size of a segment.
MAX_SEGMENT_BYTES = 32 * 2**20

Fetch = Callable[[SegmentRef], pa.Table]
Write = Callable[[str, pa.Table, int], SegmentRef]


def fold_inline(
    segments: Sequence[SegmentRef],
    new: Sequence[tuple[str, pa.Table]],
    fetch: Fetch,
    write: Write,
) -> list[SegmentRef]:
    """``segments`` with their inline rows and the cut's ``new`` tables folded into one
    level-0 segment per kind (written by ``write(kind, table, level)``), appended last."""
    kept = [ref for ref in segments if not ref.inline]
    for kind in SEGMENT_KINDS:
        tables = [fetch(ref) for ref in segments if ref.inline and ref.kind == kind]
        tables.extend(table for table_kind, table in new if table_kind == kind)
        tables = [table for table in tables if table.num_rows]
        if tables:
            kept.append(write(kind, pa.concat_tables(tables, promote_options="default"), 0))
    return kept


def merge_levels(segments: Sequence[SegmentRef], fetch: Fetch, write: Write) -> list[SegmentRef]:
    """Merge runs of :data:`MERGE_FACTOR` same-level segments of a kind, as long as any."""
    merged = list(segments)
    for kind in SEGMENT_KINDS:
        while (run := _mergeable_run(merged, kind)) is not None:
            table = pa.concat_tables([fetch(ref) for ref in run], promote_options="default")
            ref = write(kind, table, run[0].level + 1)
            first = merged.index(run[0])
            merged = [r for r in merged if r not in run]
            merged.insert(first, ref)
    return merged


def _mergeable_run(segments: Sequence[SegmentRef], kind: str) -> list[SegmentRef] | None:
    """The last :data:`MERGE_FACTOR` segment files of ``kind`` when they can be merged."""
    of_kind = [ref for ref in segments if ref.kind == kind and not ref.inline]
    run = of_kind[-MERGE_FACTOR:]
    if len(run) < MERGE_FACTOR or len({ref.level for ref in run}) != 1:
        return None
    if sum(ref.size for ref in run) > MAX_SEGMENT_BYTES:
        return None
    return run
