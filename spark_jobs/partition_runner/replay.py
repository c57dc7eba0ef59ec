"""Replay: what a resumed attempt emits before calling anything.

The committed segments come back as they were written, so a task whose earlier output
Spark discarded produces it again; outcomes already in the pending entries are emitted by
the operator on restore, without a call.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pyarrow as pa

from spark_jobs.snapshots import Manifest, PartitionSnapshots


async def replay(
    snapshots: PartitionSnapshots, schema: pa.Schema, manifest: Manifest
) -> AsyncIterator[pa.RecordBatch]:
    """The manifest's segments in commit order (verified), cast to the output ``schema``,
    read one at a time in a worker thread: never more than one segment in memory."""
    segments = snapshots.read_segments(manifest)
    while (item := await asyncio.to_thread(next, segments, None)) is not None:
        for batch in item[1].cast(schema).to_batches():
            yield batch


def pending_outcomes(manifest: Manifest) -> int:
    """Pending entries that already hold an outcome: replayed by the operator, not called."""
    return sum(1 for entry in manifest.pending if "value" in entry or "error" in entry)
