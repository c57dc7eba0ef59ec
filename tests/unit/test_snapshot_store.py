"""SnapshotStore on a local directory: commit protocol, integrity fallback, cleanup, admin."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import pickle
import re
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_jobs.records.completion import CompletionRecord
from spark_jobs.records.job_record import JobRecord
from spark_jobs.snapshots import (
    Manifest,
    ManifestError,
    NamespaceKey,
    PartitionSnapshots,
    SnapshotStore,
)
from spark_jobs.snapshots.commit_file import decode_commit

FP = "job-fingerprint-1"
KEY = NamespaceKey("enrich_dag", "enrich.partitions", "2026-11-20T00:00:00+00:00")
A1 = "task-3-attempt-1"
A2 = "task-3-attempt-2"


def rows(start: int, count: int) -> pa.Table:
    return pa.table(
        {"id": list(range(start, start + count)), "value": [f"v{i}" for i in range(count)]}
    )


@pytest.fixture
def store(tmp_path: Path) -> SnapshotStore:
    return SnapshotStore(str(tmp_path / "snaps"))


@pytest.fixture
def part(store: SnapshotStore) -> PartitionSnapshots:
    return store.partition(KEY, 3)


def commit_epoch(
    part: PartitionSnapshots,
    base: Manifest | None,
    *,
    attempt: str,
    offset: int,
    tables: list[pa.Table] | None = None,
) -> Manifest:
    """Write ``tables`` as result segments and commit the next manifest after ``base``."""
    refs = [part.write_segment(t, kind="results", attempt=attempt) for t in tables or []]
    if base is None:
        manifest = Manifest(FP, part.partition, 0, offset, attempt, segments=refs)
    else:
        manifest = base.advance(attempt=attempt, input_offset=offset, pending=[], new_segments=refs)
    return part.commit(manifest)


def manifest_file(part: PartitionSnapshots, manifest: Manifest) -> Path:
    """The commit file of ``manifest`` (committed with ``part.commit``: self-contained)."""
    for path in Path(part.path, "commits").glob("commit-*.snap"):
        try:
            stored = decode_commit(path.read_bytes(), f"commits/{path.name}", part.partition)
        except ManifestError:
            continue
        if stored.manifest == manifest:
            return path
    raise AssertionError(f"no file holds epoch {manifest.epoch} of {manifest.attempt}")


def commit_header(path: Path) -> dict:
    """The JSON header of a commit file (before the 8-byte length and the magic)."""
    data = path.read_bytes()
    length = int.from_bytes(data[-16:-8], "big")
    return json.loads(data[-16 - length : -16])


def segment_file(part: PartitionSnapshots, manifest: Manifest, index: int = -1) -> Path:
    return Path(part.path, manifest.segments[index].path)


def flip_byte(path: Path, position: int, mask: int = 0x01) -> None:
    data = bytearray(path.read_bytes())
    data[position % len(data)] ^= mask
    path.write_bytes(bytes(data))


def age(directory: str, seconds: float) -> None:
    """Pretend every file under ``directory`` was last modified ``seconds`` ago."""
    past = time.time() - seconds
    for path in Path(directory).rglob("*"):
        if path.is_file():
            os.utime(path, (past, past))


def test_round_trip(part: PartitionSnapshots) -> None:
    results = part.write_segment(rows(0, 5), kind="results", attempt=A1)
    dead = part.write_segment(rows(100, 2), kind="dead_letters", attempt=A1)
    committed = part.commit(
        Manifest(
            job_fingerprint=FP,
            partition=3,
            epoch=0,
            input_offset=7,
            attempt=A1,
            pending=[{"row": 7, "try": 1}, ["opaque", 1.5, None]],
            segments=[results, dead],
            watermark=1_700_000_000_000,
            records_total=1000,
            stats={"http_429": 3},
        )
    )

    assert committed.committed_at is not None and committed.committed_at.utcoffset() is not None
    latest = part.latest()
    assert latest == committed
    assert latest.committed_rows == 5 and latest.dead_letter_rows == 2
    assert [(kind, table.to_pylist()) for kind, table in part.read_segments(latest)] == [
        ("results", rows(0, 5).to_pylist()),
        ("dead_letters", rows(100, 2).to_pylist()),
    ]
    document = commit_header(manifest_file(part, committed))
    assert document["format_version"] == 2 and document["base"] is None
    assert document["segments"][0] == {
        "path": results.path,
        "kind": "results",
        "rows": 5,
        "sha256": results.sha256,
        "size": results.size,
        "offset": 0,
        "level": 0,
    }
    assert len(document["manifest_sha256"]) == 64


def test_snapshot_files_and_folders_are_private_to_their_owner(part: PartitionSnapshots) -> None:
    """Snapshots hold input rows and enrichment values: no other local user reads them."""
    commit_epoch(part, None, attempt=A1, offset=3, tables=[rows(0, 3)])
    paths = [Path(part.path), *Path(part.path).rglob("*")]
    assert {oct(p.stat().st_mode & 0o777) for p in paths if p.is_dir()} == {"0o700"}
    assert {oct(p.stat().st_mode & 0o777) for p in paths if p.is_file()} == {"0o600"}


def test_empty_partition_has_no_snapshot(part: PartitionSnapshots) -> None:
    assert part.latest() is None
    assert part.clean_unreferenced(grace=timedelta(0)) == []


def test_segments_are_cumulative(part: PartitionSnapshots) -> None:
    m = None
    for epoch in range(3):
        m = commit_epoch(
            part, m, attempt=A1, offset=10 * (epoch + 1), tables=[rows(epoch * 10, 10)]
        )

    latest = part.latest()
    assert latest == m and latest.epoch == 2 and len(latest.segments) == 3
    ids = [i for _, table in part.read_segments(latest) for i in table.column("id").to_pylist()]
    assert ids == list(range(30))
    with pytest.raises(ValueError, match="backwards"):
        latest.advance(attempt=A1, input_offset=5, pending=[])


def test_latest_prefers_progress_then_epoch_then_commit_time(part: PartitionSnapshots) -> None:
    base = commit_epoch(part, None, attempt=A1, offset=10)
    far = commit_epoch(part, base, attempt=A1, offset=50)  # epoch 1, most input
    commit_epoch(part, base.advance(attempt=A2, input_offset=40, pending=[]), attempt=A2, offset=45)
    assert part.latest() == far

    same_offset_higher_epoch = commit_epoch(
        part, far.advance(attempt=A2, input_offset=50, pending=[]), attempt=A2, offset=50
    )
    assert part.latest() == same_offset_higher_epoch  # epoch 3 beats epoch 1 at equal offset

    twin = part.commit(same_offset_higher_epoch)  # same offset and epoch, committed later
    assert part.latest() == twin


def test_concurrent_attempts_and_partitions(store: SnapshotStore, caplog) -> None:
    """Two attempts of each of two partitions commit at once; nobody corrupts anybody."""
    barrier = threading.Barrier(4)

    def run(partition: int, attempt: str, step: int) -> Manifest:
        part = store.partition(KEY, partition)
        barrier.wait()
        m = None
        for epoch in range(12):
            m = commit_epoch(
                part, m, attempt=attempt, offset=step * (epoch + 1), tables=[rows(epoch, 3)]
            )
        return m

    jobs = [(0, A1, 10), (0, A2, 7), (1, A1, 5), (1, A2, 9)]
    with caplog.at_level(logging.WARNING), ThreadPoolExecutor(max_workers=4) as pool:
        finals = list(pool.map(lambda job: run(*job), jobs))

    assert store.partition(KEY, 0).latest() == finals[0]  # offset 120 beats 84
    assert store.partition(KEY, 1).latest() == finals[3]  # offset 108 beats 60
    for (partition, _, _), final in zip(jobs, finals, strict=True):
        tables = list(store.partition(KEY, partition).read_segments(final))
        assert len(tables) == 12
    assert not caplog.records


@pytest.mark.parametrize(
    "damage", ["truncate", "empty", "garble", "tamper", "flip", "nan", "huge_int", "deep"]
)
def test_corrupt_latest_manifest_falls_back(part: PartitionSnapshots, damage: str, caplog) -> None:
    first = commit_epoch(part, None, attempt=A1, offset=10, tables=[rows(0, 10)])
    second = commit_epoch(part, first, attempt=A1, offset=20, tables=[rows(10, 10)])
    path = manifest_file(part, second)
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "garble":
        path.write_bytes(b"\x00garbage" + data[8:])
    elif damage == "tamper":  # still valid JSON, but not what was committed
        path.write_bytes(data.replace(b'"input_offset":20', b'"input_offset":99'))
    elif damage == "nan":  # crafted: Python's json reads NaN, canonical JSON has none
        path.write_bytes(data.replace(b'"input_offset":20', b'"input_offset":NaN'))
    elif damage == "huge_int":  # over Python's 4300-digit int limit
        path.write_bytes(data.replace(b'"input_offset":20', b'"input_offset":' + b"9" * 5000))
    elif damage == "deep":  # deep enough to exhaust the parser's stack
        path.write_bytes(
            data.replace(b'"pending":[]', b'"pending":' + b"[" * 100_000 + b"]" * 100_000)
        )
    else:
        flip_byte(path, len(data) // 3, mask=0xFF)

    with caplog.at_level(logging.WARNING):
        assert part.latest() == first
    assert path.name in caplog.text


@pytest.mark.parametrize(
    "content",
    [b'{"fingerprint": NaN}', b"[" * 100_000 + b"]" * 100_000, b'{"n": ' + b"1" * 5000 + b"}"],
)
def test_a_crafted_job_record_reads_as_absent(store: SnapshotStore, content: bytes) -> None:
    store.write_job_record(KEY, JobRecord(fingerprint="f"))
    Path(store.namespace_path(KEY), "job.json").write_bytes(content)
    assert store.read_job_record(KEY) is None


def test_corrupt_segment_invalidates_manifest(part: PartitionSnapshots, caplog) -> None:
    first = commit_epoch(part, None, attempt=A1, offset=10, tables=[rows(0, 10)])
    second = commit_epoch(part, first, attempt=A1, offset=20, tables=[rows(10, 10)])
    flip_byte(segment_file(part, second), 200)

    with caplog.at_level(logging.WARNING):
        assert part.latest() == first
    assert second.segments[-1].path in caplog.text and "sha256" in caplog.text
    # Size is unchanged, so the cheap check used by progress reports cannot see it.
    assert part.latest(verify_content=False) == second
    with pytest.raises(ManifestError, match="sha256"):
        list(part.read_segments(second))


@pytest.mark.parametrize("damage", ["delete", "truncate"])
def test_missing_or_truncated_segment(part: PartitionSnapshots, damage: str, caplog) -> None:
    first = commit_epoch(part, None, attempt=A1, offset=10, tables=[rows(0, 10)])
    second = commit_epoch(part, first, attempt=A1, offset=20, tables=[rows(10, 10)])
    path = segment_file(part, second)
    if damage == "delete":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[:-10])

    with caplog.at_level(logging.WARNING):
        assert part.latest() == first
        assert part.latest(verify_content=False) == first
    assert second.segments[-1].path in caplog.text
    segment_file(part, first, 0).unlink()  # inherited by both manifests
    assert part.latest() is None


def test_manifest_cannot_reference_outside_its_partition(part: PartitionSnapshots) -> None:
    committed = commit_epoch(part, None, attempt=A1, offset=10, tables=[rows(0, 3)])
    document = json.loads(committed.to_json_bytes())
    del document["manifest_sha256"]
    document["segments"][0]["path"] = "segments/../../../part-00004/segments/x.arrow"
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"))
    document["manifest_sha256"] = hashlib.sha256(canonical.encode()).hexdigest()

    with pytest.raises(ManifestError, match="invalid segment path"):
        Manifest.from_json_bytes(json.dumps(document).encode())


def test_manifest_copied_from_another_partition_is_ignored(
    store: SnapshotStore, part: PartitionSnapshots, caplog
) -> None:
    other = store.partition(KEY, 4)
    foreign = commit_epoch(other, None, attempt=A1, offset=99)
    target = Path(part.path, "commits")
    target.mkdir(parents=True)
    source = manifest_file(other, foreign)
    (target / source.name).write_bytes(source.read_bytes())

    with caplog.at_level(logging.WARNING):
        assert part.latest() is None
    assert "belongs to partition 4" in caplog.text


def test_commit_rejects_bad_manifests(store: SnapshotStore, part: PartitionSnapshots) -> None:
    ref = part.write_segment(rows(0, 3), kind="results", attempt=A1)
    with pytest.raises(ValueError, match="partition 4, not 3"):
        part.commit(Manifest(FP, 4, 0, 3, A1, segments=[ref]))
    foreign = store.partition(KEY, 5).write_segment(rows(0, 1), kind="results", attempt=A1)
    with pytest.raises(ValueError, match="missing"):
        part.commit(Manifest(FP, 3, 0, 3, A1, segments=[ref, foreign]))
    with pytest.raises(TypeError, match="JSON"):
        part.commit(Manifest(FP, 3, 0, 3, A1, pending=[object()], segments=[ref]))
    with pytest.raises(ValueError, match="kind"):
        part.write_segment(rows(0, 1), kind="other", attempt=A1)
    assert not Path(part.path, "commits").exists() or not any(Path(part.path, "commits").iterdir())


def test_uncommitted_files_are_ignored_and_cleaned_after_grace(part: PartitionSnapshots) -> None:
    history = []
    for epoch in range(4):
        base = history[-1] if history else None
        history.append(
            commit_epoch(part, base, attempt=A1, offset=epoch + 1, tables=[rows(epoch, 1)])
        )
    latest = history[-1]
    orphan = part.write_segment(rows(50, 5), kind="results", attempt=A2)  # never committed
    manifests = Path(part.path, "commits")
    strays = [
        "commits/commit-000000000009-00000009-task-3-attempt-2-0badf00d.snap.tmp",
        "commits/commit-000000000009-00000009-task-3-attempt-2-deadbeef.snap",
        "commits/notes.txt",
    ]
    for stray in strays:
        Path(part.path, stray).write_bytes(b"{partial")

    assert part.latest() == latest
    assert part.clean_unreferenced() == []  # everything is younger than the grace period

    superseded = [f"commits/{manifest_file(part, m).name}" for m in history[:2]]
    age(part.path, seconds=3600)
    in_progress = part.write_segment(rows(60, 1), kind="results", attempt=A2)  # fresh
    deleted = part.clean_unreferenced(keep_manifests=2)

    assert deleted == sorted([orphan.path, *strays, *superseded])
    assert Path(part.path, in_progress.path).exists()
    assert sorted(f"commits/{p.name}" for p in manifests.iterdir()) == sorted(
        f"commits/{manifest_file(part, m).name}" for m in history[2:]
    )
    assert part.latest() == latest
    assert len(list(part.read_segments(latest))) == 4


def test_newer_format_is_skipped_and_blocks_cleanup(part: PartitionSnapshots, caplog) -> None:
    committed = commit_epoch(part, None, attempt=A1, offset=1, tables=[rows(0, 1)])
    name = "commit-000000000005-00000005-task-3-attempt-9-0123abcd.snap"
    future = Path(part.path, "commits", name)
    header = json.dumps({"format_version": 3, "layout": "unknown to this reader"}).encode()
    future.write_bytes(header + len(header).to_bytes(8, "big") + b"ENRSNAP" + bytes([3]))
    orphan = part.write_segment(rows(1, 1), kind="results", attempt=A2)
    age(part.path, seconds=3600)

    with caplog.at_level(logging.WARNING):
        assert part.latest() == committed
        assert part.clean_unreferenced(grace=timedelta(0)) == []
    assert "newer format" in caplog.text
    assert future.exists() and Path(part.path, orphan.path).exists()


def test_cleanup_drops_a_superseded_branch(part: PartitionSnapshots) -> None:
    base = commit_epoch(part, None, attempt=A1, offset=10, tables=[rows(0, 1)])
    zombie = commit_epoch(part, base, attempt=A2, offset=11, tables=[rows(1, 1)])
    best = commit_epoch(part, base, attempt=A1, offset=30, tables=[rows(2, 1)])
    age(part.path, seconds=3600)

    deleted = part.clean_unreferenced(keep_manifests=1)

    assert zombie.segments[-1].path in deleted
    assert best.segments[0].path not in deleted  # inherited from base, still referenced
    assert part.latest() == best


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("dag_id", ""),
        ("dag_id", "a/b"),
        ("dag_id", "a\\b"),
        ("dag_id", ".."),
        ("dag_id", "."),
        ("task_id", "t\x00"),
        ("task_id", "t\nx"),
        ("task_id", "tâche"),
        ("task_id", "a b"),
        ("interval_start", "../../etc"),
        ("interval_start", "2026%3A"),
        ("interval_start", "x" * 300),
    ],
)
def test_bad_namespace_components(field: str, value: str) -> None:
    values = {"dag_id": "d", "task_id": "t", "interval_start": "i", field: value}
    with pytest.raises(ValueError) as info:
        NamespaceKey(**values)
    assert field in str(info.value) and repr(value)[:40] in str(info.value)


def test_bad_partition_and_attempt(store: SnapshotStore, part: PartitionSnapshots) -> None:
    for partition in (-1, True, "3"):
        with pytest.raises(ValueError, match="partition"):
            store.partition(KEY, partition)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape("attempt '../x'")):
        part.write_segment(rows(0, 1), kind="results", attempt="../x")
    with pytest.raises(ValueError, match="attempt"):
        Manifest(FP, 3, 0, 0, "a/b")


def test_interval_encoding_never_collides(store: SnapshotStore) -> None:
    colon = NamespaceKey("d", "t", "2026-11-20T00:00:00+00:00")
    underscore = NamespaceKey("d", "t", "2026-11-20T00_00_00_00_00")
    assert store.namespace_path(colon) != store.namespace_path(underscore)
    commit_epoch(store.partition(colon, 0), None, attempt=A1, offset=1)
    commit_epoch(store.partition(underscore, 0), None, attempt=A1, offset=2)

    listed = {key: store.namespace_progress(key)[0].input_offset for key in store.namespace_keys()}
    assert listed == {colon: 1, underscore: 2}


def test_namespace_keys_discard_and_mark_completed(store: SnapshotStore, tmp_path: Path) -> None:
    other = NamespaceKey("enrich_dag", "enrich.partitions", "2026-11-21T00:00:00+00:00")
    for number, offset in [(0, 5), (1, 7)]:
        p = store.partition(KEY, number)
        commit_epoch(p, None, attempt=A1, offset=offset, tables=[rows(0, offset)])
    commit_epoch(store.partition(other, 2), None, attempt=A2, offset=1)
    (tmp_path / "snaps" / "not a namespace").mkdir()
    Path(store.partition(KEY, 9).path).mkdir(parents=True)  # no manifest: not reported

    assert set(store.namespace_keys()) == {KEY, other}
    progress = store.namespace_progress(KEY)
    assert [(p.partition, p.input_offset, p.committed_rows, p.attempt) for p in progress] == [
        (0, 5, 5, A1),
        (1, 7, 7, A1),
    ]
    assert store.namespace_progress(other)[0].attempt == A2

    assert store.discard(other) is True
    assert store.discard(other) is False
    # After success the job replaces the snapshots by a completion record (enrich_job).
    store.mark_completed(KEY, CompletionRecord(FP))
    assert store.namespace_keys() == [KEY] and store.namespace_progress(KEY) == []
    assert store.read_completed(KEY) == CompletionRecord(FP)
    assert store.partitions(KEY) == []


def test_store_level_cleanup_covers_all_partitions(store: SnapshotStore) -> None:
    for number in (0, 1):
        p = store.partition(KEY, number)
        p.write_segment(rows(0, 1), kind="results", attempt=A2)
        commit_epoch(p, None, attempt=A1, offset=1)
    age(store.namespace_path(KEY), seconds=3600)

    deleted = store.clean_unreferenced(KEY, grace=timedelta(minutes=5))
    assert sorted(deleted) == [0, 1] and all(len(paths) == 1 for paths in deleted.values())


def test_partition_handle_pickles_for_spark_executors(part: PartitionSnapshots) -> None:
    committed = commit_epoch(part, None, attempt=A1, offset=2, tables=[rows(0, 2)])
    assert pickle.loads(pickle.dumps(part)).latest() == committed


async def test_commit_from_event_loop_via_thread(part: PartitionSnapshots) -> None:
    ref = await asyncio.to_thread(part.write_segment, rows(0, 4), kind="results", attempt=A1)
    manifest = Manifest(FP, 3, 0, 4, A1, pending=[{"in_flight": 4}], segments=[ref])
    committed = await asyncio.to_thread(part.commit, manifest)
    assert await asyncio.to_thread(part.latest) == committed


def test_file_url_and_plain_path_are_equivalent(tmp_path: Path) -> None:
    plain = SnapshotStore(str(tmp_path / "snaps"))
    url = SnapshotStore((tmp_path / "snaps").as_uri() + "/")
    committed = commit_epoch(
        plain.partition(KEY, 0), None, attempt=A1, offset=3, tables=[rows(0, 3)]
    )

    assert url.partition(KEY, 0).latest() == committed
    assert url.namespace_path(KEY) == plain.namespace_path(KEY)
    assert repr(url) == repr(plain)


ATTEMPTS = (A1, A2)
OPERATIONS = st.one_of(
    st.tuples(st.just("commit"), st.sampled_from(ATTEMPTS), st.integers(0, 5), st.booleans()),
    st.tuples(
        st.just("manifest"),
        st.integers(0, 99),
        st.sampled_from(["truncate", "garble", "delete"]),
        st.integers(0, 10_000),
    ),
    st.tuples(
        st.just("segment"),
        st.integers(0, 99),
        st.sampled_from(["flip", "truncate", "delete"]),
        st.integers(0, 10_000),
    ),
)


def damage(path: Path, how: str, position: int) -> None:
    if how == "delete":
        path.unlink()
        return
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[: position % len(data)])
    else:  # garble the manifest / flip one bit of the segment
        flip_byte(path, position, mask=0xFF if how == "garble" else 0x01)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations=st.lists(OPERATIONS, min_size=1, max_size=16))
def test_latest_is_the_best_uncorrupted_manifest(operations: list[tuple]) -> None:
    """Two attempts commit and files get damaged in any order: latest() stays correct."""
    with tempfile.TemporaryDirectory() as tmp:
        part = SnapshotStore(tmp).partition(KEY, 3)
        heads: dict[str, Manifest] = {}
        committed: list[tuple[Manifest, Path]] = []
        damaged: dict[Path, str] = {}
        for operation in operations:
            if operation[0] == "commit":
                _, attempt, delta, with_segment = operation
                base = heads.get(attempt) or part.latest()
                refs = []
                if with_segment:
                    refs = [part.write_segment(rows(0, delta), kind="results", attempt=attempt)]
                if base is None:
                    manifest = Manifest(FP, 3, 0, delta, attempt, segments=refs)
                else:
                    manifest = base.advance(
                        attempt=attempt,
                        input_offset=base.input_offset + delta,
                        pending=[{"offset": base.input_offset + delta}],
                        new_segments=refs,
                    )
                if any(
                    damaged.get(Path(part.path, s.path)) in ("delete", "truncate")
                    for s in manifest.segments
                ):
                    with pytest.raises(ValueError, match="cannot commit"):
                        part.commit(manifest)
                    continue
                manifest = part.commit(manifest)
                heads[attempt] = manifest
                committed.append((manifest, manifest_file(part, manifest)))
            elif committed:
                _, index, how, position = operation
                manifest, manifest_path = committed[index % len(committed)]
                if operation[0] == "manifest":
                    target = manifest_path
                elif manifest.segments:
                    target = Path(part.path, manifest.segments[index % len(manifest.segments)].path)
                else:
                    continue
                if target not in damaged:
                    damage(target, how, position)
                    damaged[target] = how

        intact = [
            manifest
            for manifest, path in committed
            if path not in damaged
            and not any(Path(part.path, s.path) in damaged for s in manifest.segments)
        ]
        expected = max(intact, key=Manifest.progress_key, default=None)
        latest = part.latest()
        if expected is None:
            assert latest is None
        else:
            assert latest is not None and latest.progress_key() == expected.progress_key()
            assert len(list(part.read_segments(latest))) == len(latest.segments)
