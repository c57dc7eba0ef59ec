"""Segment encoding: one pyarrow.Table per immutable Arrow IPC file, checksummed.

Segments are serialised in memory and uploaded with a single write, so their sha256 and
size are known before the manifest that references them is committed.
"""

from __future__ import annotations

import hashlib

import pyarrow as pa

from .documents import ManifestError
from .manifest import SegmentRef

# Enrichment results are mostly repetitive strings; zstd shrinks them cheaply.
_WRITE_OPTIONS = pa.ipc.IpcWriteOptions(compression="zstd")


def encode_table(table: pa.Table) -> bytes:
    """Serialise ``table`` as an Arrow IPC file (random-access format, with footer)."""
    if not isinstance(table, pa.Table):
        raise TypeError(f"expected a pyarrow.Table, got {type(table).__name__}")
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema, options=_WRITE_OPTIONS) as writer:
        writer.write_table(table)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def decode_segment(data: bytes, ref: SegmentRef) -> pa.Table:
    """Verify ``data`` against ``ref`` and decode it; any mismatch raises ManifestError."""
    if len(data) != ref.size:
        raise ManifestError(f"segment {ref.path}: size {len(data)} != expected {ref.size}")
    actual = sha256_hex(data)
    if actual != ref.sha256:
        raise ManifestError(f"segment {ref.path}: sha256 {actual} != expected {ref.sha256}")
    try:
        table = pa.ipc.open_file(pa.py_buffer(data)).read_all()
    except pa.ArrowException as exc:
        raise ManifestError(f"segment {ref.path}: not a readable Arrow IPC file ({exc})") from exc
    if table.num_rows != ref.rows:
        raise ManifestError(f"segment {ref.path}: {table.num_rows} rows != expected {ref.rows}")
    return table
