"""Crafted snapshot files against their readers, on a real local store: counters that are
not numbers make a commit (format 2) or a manifest (format 1) corrupt where it is parsed,
partition directories beyond the job's count or the cap are ignored, and files over a
reader's limit are refused before they are read."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from fsspec.implementations.local import LocalFileSystem

from spark_jobs.driver.progress import ProgressFolder
from spark_jobs.records.cost import CostReport
from spark_jobs.records.job_record import JobRecord
from spark_jobs.snapshots import (
    Manifest,
    ManifestError,
    NamespaceKey,
    SnapshotStore,
    commit_file,
    reader,
)
from spark_jobs.snapshots import writer as writer_module
from spark_jobs.snapshots.compat import format1
from spark_jobs.snapshots.documents import CHECKSUM_KEY, canonical
from spark_jobs.snapshots.paths import MAX_PARTITIONS, manifest_name
from spark_jobs.snapshots.storage import write_atomically

KEY = NamespaceKey("dag", "task", "2026-11-20")
STATS = {"finished": False, "requests_made": 3, "run_id": "r1"}


def commit(store: SnapshotStore, partition: int, offset: int, base=None, **stats) -> Manifest:
    part = store.partition(KEY, partition)
    table = pa.table({"id": [str(offset)]})
    ref = part.write_segment(table, kind="results", attempt="a1")
    if base is None:
        manifest = Manifest("fp", partition, 0, offset, "a1", segments=[ref], stats=STATS)
    else:
        manifest = base.advance(attempt="a1", input_offset=offset, pending=[], new_segments=[ref])
    return part.commit(dataclasses.replace(manifest, stats={**STATS, **stats}))


def resealed(document: dict) -> bytes:
    """``document`` with a valid checksum again, as anyone with write access can make it."""
    document.pop(CHECKSUM_KEY, None)
    digest = hashlib.sha256(canonical(document).encode()).hexdigest()
    return (canonical({**document, CHECKSUM_KEY: digest}) + "\n").encode()


def craft_newest_commit(store: SnapshotStore, partition: int, **stats) -> Path:
    """Rewrite the newest commit file's header with ``stats`` and a matching checksum."""
    [path] = sorted(Path(store.partition(KEY, partition).path, "commits").iterdir())[-1:]
    data = path.read_bytes()
    length = int.from_bytes(data[-16:-8], "big")
    header = json.loads(data[-16 - length : -16])
    header["stats"].update(stats)
    new = resealed(header)
    path.write_bytes(data[: -16 - length] + new + len(new).to_bytes(8, "big") + data[-8:])
    return path


@pytest.mark.parametrize(
    "counter",
    [{"requests_made": "x"}, {"requests_made": [1]}, {"in_flight": -1}, {"finished": "no"}],
)
def test_a_commit_with_counters_that_are_not_counts_is_corrupt(tmp_path, caplog, counter):
    store = SnapshotStore(str(tmp_path))
    first = commit(store, 0, 10)
    commit(store, 0, 20, base=first)
    path = craft_newest_commit(store, 0, **counter)
    with caplog.at_level(logging.WARNING):
        assert store.partition(KEY, 0).latest() == first
    assert path.name in caplog.text and f"stats.{next(iter(counter))}" in caplog.text
    record = ProgressFolder(store, KEY, "r1", 1, 20).refresh()  # the driver's fold
    assert [p.input_offset for p in record.partitions] == [10]


def test_a_format_1_manifest_with_a_string_counter_is_corrupt(tmp_path, caplog):
    store = SnapshotStore(str(tmp_path))
    part = store.partition(KEY, 0)
    ref = part.write_segment(pa.table({"id": ["a"]}), kind="results", attempt="a0")
    good = Manifest("fp", 0, 0, 1, "a0", segments=[ref], stats=STATS)
    good = dataclasses.replace(good, committed_at=datetime.now(UTC))
    write_atomically(
        LocalFileSystem(),
        f"{part.path}/manifests",
        manifest_name(0, "a0", "0" * 8),
        good.to_json_bytes(),
    )
    crafted = json.loads(dataclasses.replace(good, epoch=1, input_offset=2).to_json_bytes())
    crafted["stats"]["response_cache_hits"] = "1e9"
    name = manifest_name(1, "a0", "1" * 8)
    write_atomically(LocalFileSystem(), f"{part.path}/manifests", name, resealed(crafted))
    with pytest.raises(ManifestError, match=r"stats\.response_cache_hits"):
        Manifest.from_json_bytes(resealed(crafted))
    with caplog.at_level(logging.WARNING):
        assert part.latest() == good
    assert name in caplog.text


def test_partition_directories_beyond_the_jobs_count_or_the_cap_are_ignored(tmp_path):
    """One valid commit in ``part-99999`` once made every progress read fold (and the page
    show) a hundred thousand partitions."""
    store = SnapshotStore(str(tmp_path))
    commit(store, 1, 5)
    commit(store, 99_999, 5)
    beyond = Path(store.namespace_path(KEY), f"part-{MAX_PARTITIONS}")
    beyond.mkdir()
    assert store.partitions(KEY) == [1, 99_999]
    record = ProgressFolder(store, KEY, "r1", 4, 20).refresh()
    assert [p.partition for p in record.partitions] == [1]


def count_reads(monkeypatch) -> list[str]:
    read: list[str] = []
    original = LocalFileSystem.cat_file

    def cat_file(self, path, *args, **kwargs):
        read.append(str(path))
        return original(self, path, *args, **kwargs)

    monkeypatch.setattr(LocalFileSystem, "cat_file", cat_file)
    return read


def test_a_commit_file_over_the_readers_limit_is_refused_unread(tmp_path, monkeypatch, caplog):
    store = SnapshotStore(str(tmp_path))
    first = commit(store, 0, 10)
    commit(store, 0, 20, base=first)
    newest = sorted(Path(store.partition(KEY, 0).path, "commits").iterdir())[-1]
    monkeypatch.setattr(reader, "MAX_COMMIT_BYTES", newest.stat().st_size - 1)
    read = count_reads(monkeypatch)
    with caplog.at_level(logging.WARNING):
        assert store.partition(KEY, 0).latest() == first
    assert not [p for p in read if p.endswith(newest.name)], "read before its size was checked"
    assert f"over {newest.stat().st_size - 1}: not read" in caplog.text


def test_a_format_1_manifest_over_the_limit_is_refused_unread(tmp_path, monkeypatch, caplog):
    store = SnapshotStore(str(tmp_path))
    part = store.partition(KEY, 0)
    manifest = dataclasses.replace(
        Manifest("fp", 0, 0, 1, "a0", pending=["x" * 5000]), committed_at=datetime.now(UTC)
    )
    name = manifest_name(0, "a0", "0" * 8)
    write_atomically(LocalFileSystem(), f"{part.path}/manifests", name, manifest.to_json_bytes())
    monkeypatch.setattr(format1, "MAX_DOCUMENT_BYTES", 4096)
    read = []
    original = LocalFileSystem.cat

    def cat(self, paths, *args, **kwargs):
        read.extend(paths)
        return original(self, paths, *args, **kwargs)

    monkeypatch.setattr(LocalFileSystem, "cat", cat)
    with caplog.at_level(logging.WARNING):
        assert part.latest() is None
    assert not read and "over the limit" in caplog.text


@pytest.mark.parametrize("record", ["completed.json", "job.json"])
def test_an_oversized_job_or_completion_record_is_read_with_a_bound(tmp_path, monkeypatch, record):
    store = SnapshotStore(str(tmp_path))
    store.write_job_record(KEY, JobRecord(fingerprint="f"))
    Path(store.namespace_path(KEY), record).write_bytes(b" " * (65 * 2**20) + b"{}")
    sizes = []
    original = LocalFileSystem.cat_file

    def cat_file(self, path, start=None, end=None, **kwargs):
        data = original(self, path, start=start, end=end, **kwargs)
        sizes.append(len(data))
        return data

    monkeypatch.setattr(LocalFileSystem, "cat_file", cat_file)
    assert store.read_completed(KEY) is None and store.read_job_record(KEY) in (
        None,
        JobRecord(fingerprint="f"),
    )
    assert max(sizes) <= 64 * 2**20 + 1


def test_a_completion_record_with_costs_that_are_not_numbers_is_corrupt(tmp_path):
    store = SnapshotStore(str(tmp_path))
    counts = {"records_in": 3, "enriched": 3, "dead_letters": 0}
    completed = Path(store.namespace_path(KEY), "completed.json")
    completed.parent.mkdir(parents=True)
    completed.write_text(json.dumps({"summary": {**counts, "cost": {"requests_made": "3"}}}))
    with pytest.raises(ManifestError, match=r"summary\.cost\.requests_made is '3', not a number"):
        store.completion_record(KEY)
    assert store.read_completed(KEY) is None  # resume and the reporter: as if absent
    completed.write_text(json.dumps({"summary": {**counts, "cost": {"estimated_cost": 0.25}}}))
    record = store.completion_record(KEY)
    assert record is not None and record.summary is not None
    assert record.summary.cost == CostReport(estimated_cost=0.25)


def test_a_cut_too_large_to_sit_inline_is_written_as_a_base_its_reader_accepts(
    tmp_path, monkeypatch
):
    """The writer never writes a commit over the reader's limit: rows that would make one
    go to segment files, and the commit is a base (no inline rows)."""
    limit = 64 * 2**10
    monkeypatch.setattr(writer_module, "MAX_COMMIT_BYTES", limit)
    monkeypatch.setattr(reader, "MAX_COMMIT_BYTES", limit)
    store = SnapshotStore(str(tmp_path))
    part = store.partition(KEY, 0)
    writer = part.writer("a1")
    first = writer.commit(Manifest("fp", 0, 0, 1, "a1", stats=STATS), [])
    small = pa.table({"id": ["a"] * 10})
    second = writer.commit(
        first.advance(attempt="a1", input_offset=2, pending=[]), [("results", small)]
    )
    large = pa.table({"id": [os.urandom(500).hex() for _ in range(200)]})  # 200 KB, random
    third = writer.commit(
        second.advance(attempt="a1", input_offset=3, pending=[]), [("results", large)]
    )
    assert all(p.stat().st_size <= limit for p in Path(part.path, "commits").iterdir())
    assert not any(ref.inline for ref in third.segments)  # a base: rows in segment files
    assert part.latest() == third and third.committed_rows == 210
    assert sum(t.num_rows for _, t in part.read_segments(third)) == 210


def test_a_header_over_the_readers_limit_is_never_written(tmp_path, monkeypatch):
    store = SnapshotStore(str(tmp_path))
    part = store.partition(KEY, 0)
    writer = part.writer("a1")
    first = writer.commit(Manifest("fp", 0, 0, 1, "a1", stats=STATS), [])
    monkeypatch.setattr(commit_file, "MAX_DOCUMENT_BYTES", 8192)
    pending = [{"record": i, "attempts": 1, "value": {"v": "z" * 1000}} for i in range(20)]
    with pytest.raises(commit_file.CommitTooLargeError, match="over the reader's limit of 8192"):
        writer.commit(first.advance(attempt="a1", input_offset=2, pending=pending), [])
    assert part.latest() == first and len(list(Path(part.path, "commits").iterdir())) == 1
