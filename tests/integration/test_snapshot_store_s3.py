"""SnapshotStore against S3 semantics (single-PUT commit, prefix listings) on a moto server."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import boto3
import pyarrow as pa
import pytest
import s3fs
from moto.server import ThreadedMotoServer

from spark_jobs.snapshots import Manifest, NamespaceKey, PartitionSnapshots, SnapshotStore

KEY = NamespaceKey("enrich_dag", "enrich", "2026-11-20T00:00:00+00:00")
ACCESS_KEY = "AKIDSNAPSHOTTEST"
SECRET = "do-not-leak-this-secret"
A1 = "task-3-attempt-1"
A2 = "task-3-attempt-2"


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    s3fs.S3FileSystem.clear_instance_cache()
    server.stop()


@pytest.fixture
def s3(endpoint: str):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
    )


@pytest.fixture
def bucket(s3) -> str:
    name = f"snapshots-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def store(endpoint: str, bucket: str) -> SnapshotStore:
    return SnapshotStore(
        f"s3://{bucket}/prefix",
        storage_options={
            "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
            "key": ACCESS_KEY,
            "secret": SECRET,
        },
    )


def rows(start: int, count: int) -> pa.Table:
    return pa.table({"id": list(range(start, start + count))})


def commit_epoch(
    part: PartitionSnapshots, base: Manifest | None, *, attempt: str, offset: int, count: int
) -> Manifest:
    refs = [part.write_segment(rows(offset - count, count), kind="results", attempt=attempt)]
    if base is None:
        return part.commit(Manifest("fp", part.partition, 0, offset, attempt, segments=refs))
    return part.commit(
        base.advance(attempt=attempt, input_offset=offset, pending=[offset], new_segments=refs)
    )


def object_key(bucket: str, part: PartitionSnapshots, relative: str) -> str:
    return f"{part.path}/{relative}".removeprefix(f"{bucket}/")


def manifest_keys(s3, bucket: str, part: PartitionSnapshots) -> list[str]:
    """The keys of the partition's commit files, least progress first."""
    prefix = object_key(bucket, part, "commits/")
    listing = s3.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(item["Key"] for item in listing.get("Contents", []))


def test_round_trip_and_cumulative_segments(store: SnapshotStore, s3, bucket: str) -> None:
    part = store.partition(KEY, 3)
    assert part.latest() is None
    m = None
    for epoch in range(3):
        m = commit_epoch(part, m, attempt=A1, offset=10 * (epoch + 1), count=10)

    latest = store.partition(KEY, 3).latest()
    assert latest == m and len(latest.segments) == 3
    ids = [i for _, table in part.read_segments(latest) for i in table.column("id").to_pylist()]
    assert ids == list(range(30))
    keys = manifest_keys(s3, bucket, part)
    assert len(keys) == 3 and all(".tmp" not in k for k in keys)  # single PUT, no temp files
    assert "%3A00%3A00%2B00%3A00/part-00003/commits/commit-000000000030-00000002-" in keys[-1]


def test_concurrent_attempts(store: SnapshotStore) -> None:
    """Two attempts share one s3fs instance and commit at once; listings must stay fresh."""
    part = store.partition(KEY, 0)
    barrier = threading.Barrier(2)

    def run(attempt: str, step: int) -> Manifest:
        barrier.wait()
        m = None
        for epoch in range(8):
            m = commit_epoch(part, m, attempt=attempt, offset=step * (epoch + 1), count=1)
        return m

    with ThreadPoolExecutor(max_workers=2) as pool:
        best, other = pool.map(lambda args: run(*args), [(A1, 10), (A2, 7)])

    assert part.latest() == best
    assert len(list(part.read_segments(other))) == 8


def test_corruption_falls_back(store: SnapshotStore, s3, bucket: str, caplog) -> None:
    part = store.partition(KEY, 1)
    first = commit_epoch(part, None, attempt=A1, offset=10, count=10)
    second = commit_epoch(part, first, attempt=A1, offset=20, count=10)
    third = commit_epoch(part, second, attempt=A2, offset=30, count=10)

    newest = manifest_keys(s3, bucket, part)[-1]
    body = s3.get_object(Bucket=bucket, Key=newest)["Body"].read()
    s3.put_object(Bucket=bucket, Key=newest, Body=body[: len(body) // 2])
    with caplog.at_level(logging.WARNING):
        assert part.latest() == second
    assert newest.rsplit("/", 1)[-1] in caplog.text

    segment = object_key(bucket, part, second.segments[-1].path)
    data = bytearray(s3.get_object(Bucket=bucket, Key=segment)["Body"].read())
    data[100] ^= 0x01
    s3.put_object(Bucket=bucket, Key=segment, Body=bytes(data))
    assert part.latest() == first

    s3.delete_object(Bucket=bucket, Key=object_key(bucket, part, first.segments[0].path))
    assert part.latest() is None
    assert third.epoch == 2


def test_list_clean_and_discard(store: SnapshotStore, s3, bucket: str) -> None:
    other = NamespaceKey("enrich_dag", "enrich", "2026-11-21T00:00:00+00:00")
    part = store.partition(KEY, 2)
    m = None
    for epoch in range(3):
        m = commit_epoch(part, m, attempt=A1, offset=epoch + 1, count=1)
    orphan = part.write_segment(rows(0, 1), kind="results", attempt=A2)
    commit_epoch(store.partition(other, 0), None, attempt=A1, offset=4, count=4)

    assert part.clean_unreferenced(keep_manifests=1) == []  # all within the grace period
    deleted = part.clean_unreferenced(keep_manifests=1, grace=timedelta(0))
    assert orphan.path in deleted and len(deleted) == 3  # the orphan and two old commits
    assert part.latest() == m and len(manifest_keys(s3, bucket, part)) == 1

    assert set(store.namespace_keys()) == {KEY, other}
    assert [
        (p.partition, p.input_offset, p.committed_rows) for p in store.namespace_progress(KEY)
    ] == [(2, 3, 3)]
    assert store.discard(KEY) is True
    assert store.discard(KEY) is False
    assert store.namespace_keys() == [other]
    remaining = s3.list_objects_v2(Bucket=bucket, Prefix="prefix/")["Contents"]
    assert all("2026-11-21" in item["Key"] for item in remaining)


def test_format_2_cuts_compact_prune_and_resume_exactly_on_s3(
    store: SnapshotStore, s3, bucket: str
) -> None:
    """Writers of two attempts (the second resumed after the first is killed) commit 90
    cuts with a base every 4: inline rows come back by ranged GETs, bases fold and merge
    them into segments, superseded objects are deleted in bulk, and the rows are exact."""
    part = store.partition(KEY, 7)
    manifest, expected, offset = None, [], 0
    for attempt, cuts in ((A1, 60), (A2, 30)):
        writer = part.writer(attempt, checkpoint_interval=4)
        manifest = part.latest()
        assert (manifest.input_offset if manifest else 0) == offset
        for _ in range(cuts):
            offset += 2
            table = rows(offset - 2, 2)
            if manifest is None:
                nxt = Manifest("fp", part.partition, 0, offset, attempt)
            else:
                nxt = manifest.advance(attempt=attempt, input_offset=offset, pending=[offset])
            manifest = writer.commit(nxt, [("results", table)])
            expected.extend(table.column("id").to_pylist())

    latest = store.partition(KEY, 7).latest()
    assert latest == manifest
    ids = [i for _, table in part.read_segments(latest) for i in table.column("id").to_pylist()]
    assert ids == expected == list(range(180))
    assert any(ref.inline for ref in latest.segments)
    assert any(ref.level > 0 for ref in latest.segments)  # 8 bases of a kind were merged
    # Pruned while they ran: each attempt leaves at most two intervals of its own commits.
    assert len(manifest_keys(s3, bucket, part)) <= 2 * (2 * 4 + 2)


def test_credentials_never_leak(store: SnapshotStore, s3, bucket: str, caplog) -> None:
    part = store.partition(KEY, 5)
    with caplog.at_level(logging.DEBUG, logger="spark_jobs.snapshots"):
        committed = commit_epoch(part, None, attempt=A1, offset=1, count=1)
        ref = store.partition(KEY, 6).write_segment(rows(0, 1), kind="results", attempt=A1)
        with pytest.raises(ValueError) as error:
            part.commit(
                committed.advance(attempt=A1, input_offset=2, pending=[], new_segments=[ref])
            )
        for key in store.namespace_keys():
            store.namespace_progress(key)
        store.discard(KEY)

    manifest = committed.to_json_bytes().decode()
    for text in (manifest, repr(store), repr(part), str(error.value), caplog.text):
        assert SECRET not in text and ACCESS_KEY not in text
