"""Durable, verifiable progress snapshots of enrichment partitions, on any fsspec filesystem.

After a crash a partition resumes from its best snapshot: committed result segments are
replayed, the input is skipped to the committed offset and the pending (in-flight)
operator entries are processed again.

Usage::

    from spark_jobs.snapshots import Manifest, NamespaceKey, SnapshotStore

    store = SnapshotStore("s3://bucket/prefix", storage_options={...})  # or a local path
    key = NamespaceKey(dag_id="d", task_id="t", interval_start="2026-11-20T00:00:00+00:00")
    part = store.partition(key, partition=3)

    m = part.latest()                      # best valid Manifest, or None
    if m is not None:
        for kind, table in part.read_segments(m):   # commit order, verified, one at a time
            ...
    writer = part.writer("task-3-attempt-1")         # one per attempt: constant-cost cuts
    m = writer.commit(m.advance(attempt="task-3-attempt-1", input_offset=5000,
                                pending=entries), [("results", table)], check_lease)
    # first snapshot: writer.commit(Manifest(job_fingerprint=..., partition=3, epoch=0, ...), ...)

    store.namespace_keys(); store.namespace_progress(key)
    store.clean_unreferenced(key); store.discard(key)
    store.mark_completed(key, record)      # after success: a completion record replaces them

Layout (snapshot format 2)::

    <root>/<dag_id>/<task_id>/<interval_start>/part-00003/
        commits/commit-<offset:012d>-<epoch:08d>-<attempt>-<uuid8>.snap   a cut: rows + header
        segments/<kind>-<attempt>-<uuid32>.arrow    Arrow IPC, immutable, folded at bases
        manifests/manifest-<epoch:08d>-<attempt>-<uuid8>.json   format 1, still read
    <root>/<dag_id>/<task_id>/<interval_start>/attempts/
        part-00003-<attempt>-<uuid8>.json                     one attempt's own counters

Guarantees: a commit appears atomically (temp + rename on local/HDFS, one PUT on object
stores) after the segments it names; with its base (every 32nd commit lists every
segment) it describes the whole partition, so a reader needs two objects. Commits and
segments carry sha256 checksums; a corrupt, truncated or dangling commit is skipped with a
warning and the next best is used (most input consumed, then highest epoch, then latest
commit; the first two are in the file name).  Concurrent attempts of a partition write
distinct files and delete only their own superseded ones.  Path components are
validated (``ValueError``) and ``:``/``+`` escaped as ``%3A``/``%2B``.

Blocking I/O throughout: call it from a thread (``asyncio.to_thread``) inside event loops.
"""

from spark_jobs.snapshots.progress import NamespaceInfo, PartitionProgress

from .attempt_counts import AttemptCounts, AttemptLedger, AttemptRecorder, LedgerReading
from .documents import ManifestError, NewerFormatError
from .lease import Heartbeat, LeaseError, NamespaceLease
from .manifest import FORMAT_VERSION, Manifest, SegmentRef
from .partition import DEFAULT_GRACE, PartitionSnapshots
from .paths import NamespaceKey
from .store import SnapshotStore

__all__ = [
    "DEFAULT_GRACE",
    "FORMAT_VERSION",
    "AttemptCounts",
    "AttemptLedger",
    "AttemptRecorder",
    "Heartbeat",
    "LeaseError",
    "LedgerReading",
    "Manifest",
    "ManifestError",
    "NamespaceInfo",
    "NamespaceKey",
    "NamespaceLease",
    "NewerFormatError",
    "PartitionProgress",
    "PartitionSnapshots",
    "SegmentRef",
    "SnapshotStore",
]
