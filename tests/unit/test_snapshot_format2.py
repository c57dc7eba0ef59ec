"""Snapshot format 2 over thousands of cuts: constant-cost cuts, bounded metadata, a
resume that reads one commit and its base, format 1 still resumed, fallback, twins.

Storage requests are counted by ``benchmarks.storage_requests.CountingFileSystem`` over a
local directory that behaves like an object store (one PUT per file, no rename)."""

from __future__ import annotations

import dataclasses
import tempfile
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.storage_requests import CountingFileSystem, Request
from spark_jobs.asyncwait import OperatorSnapshot
from spark_jobs.partition_runner.committer import Cut, CutPolicy, SnapshotCommitter
from spark_jobs.partition_runner.epoch import Epoch
from spark_jobs.partition_runner.task import PartitionTask
from spark_jobs.snapshots import LeaseError, Manifest, NamespaceLease, PartitionSnapshots
from spark_jobs.snapshots.compaction import MERGE_FACTOR
from spark_jobs.snapshots.paths import manifest_name
from spark_jobs.snapshots.storage import write_atomically
from spark_jobs.snapshots.writer import CHECKPOINT_INTERVAL, PartitionWriter

SCHEMA = pa.schema([("id", pa.string()), ("score", pa.float64()), ("_error", pa.string())])


def batch(ids: list[str], error: str | None = None) -> pa.RecordBatch:
    rows = [{"id": i, "score": None if error else 1.0, "_error": error} for i in ids]
    return pa.RecordBatch.from_pylist(rows, schema=SCHEMA)


class Partition:
    """Partition 0 of a namespace, cut by cut through the real committer; remembers every
    row committed, in order, per kind."""

    def __init__(self, root: Path, fs: CountingFileSystem | None = None) -> None:
        self.fs = fs or CountingFileSystem()
        self.namespace = f"{root}/d/t/i"
        self.part = PartitionSnapshots(self.fs, f"{self.namespace}/part-00000", 0)
        self.lease = NamespaceLease(self.fs, self.namespace, "run")
        self.lease.acquire(wait_s=0)
        self.results: list[str] = []
        self.dead: list[str] = []
        self.offset = 0
        self.committer: SnapshotCommitter | None = None

    def start_attempt(self, attempt: str) -> Manifest | None:
        """A new attempt resumes from the best commit, as a restarted task does."""
        resumed = self.part.latest()
        task = PartitionTask(0, attempt, None, "fp")
        recorder = self.part.attempt_ledger().recorder(0, attempt, "run")
        policy = CutPolicy(interval=3600.0, max_rows=10**9)
        self.committer = SnapshotCommitter(
            self.part, SCHEMA, task, resumed, policy, self.check_lease, recorder
        )
        return resumed

    def check_lease(self) -> None:
        if not self.lease.holds():
            raise LeaseError("fenced off")

    async def cut(self, number: int) -> list[Request]:
        """Commit cut ``number`` (3 results, a dead letter every 7th); its requests."""
        results = [f"r{number}-{j}" for j in range(3)]
        dead = [f"d{number}"] if number % 7 == 0 else []
        epoch = Epoch(results=[batch(results)], dead_letters=[batch(dead, "E")] if dead else [])
        self.offset += len(results) + len(dead)
        entries = [{"record": self.offset, "attempts": 1}]
        before = len(self.fs.requests)
        assert self.committer is not None
        self.committer.start(Cut(OperatorSnapshot(entries, self.offset), epoch, {"n": number}, 0))
        await self.committer.wait()
        self.results.extend(results)
        self.dead.extend(dead)
        return self.fs.requests[before:]

    def restored(self) -> tuple[Manifest, list[Request], list[str], list[str]]:
        """What a fresh reader restores: the best commit, the requests it took, its rows."""
        before = len(self.fs.requests)
        reader = PartitionSnapshots(self.fs, self.part.path, 0)
        manifest = reader.latest()
        assert manifest is not None
        results, dead = [], []
        for kind, table in reader.read_segments(manifest):
            (results if kind == "results" else dead).extend(table.column("id").to_pylist())
        return manifest, self.fs.requests[before:], results, dead


def metadata_reads(requests: list[Request]) -> int:
    """Whole-object reads of commit files (a commit or a base; inline rows are ranged)."""
    return sum(1 for r in requests if r.kind == "GET" and "/commits/" in r.path)


def files(part: PartitionSnapshots, directory: str) -> int:
    return sum(1 for p in Path(part.path, directory).iterdir() if p.is_file())


def flip_middle_byte(part: PartitionSnapshots, index: int) -> None:
    """Corrupt the commit file at ``index`` in progress order."""
    path = sorted(Path(part.path, "commits").iterdir())[index]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def is_base(number: int) -> bool:
    """Cut ``number`` (from 1) of a fresh attempt writes a base: the first, then every
    CHECKPOINT_INTERVAL."""
    return (number - 1) % CHECKPOINT_INTERVAL == 0


async def test_cut_and_resume_costs_do_not_grow_from_100_to_2000_cuts(tmp_path: Path) -> None:
    partition = Partition(tmp_path)
    partition.start_attempt("a1")
    cuts: dict[int, list[Request]] = {}
    resumes = {}
    for number in range(1, 2001):
        cuts[number] = await partition.cut(number)
        if number in (100, 2000):
            resumes[number] = partition.restored()

    ordinary = [n for n in cuts if not is_base(n)]
    # The one read is the lease check (a bounded GET-range: lease.py).
    assert all(Counter(r.kind for r in cuts[n]) == {"PUT": 2, "GET-range": 1} for n in ordinary)
    early, late = range(65, 129), range(1937, 2001)  # two checkpoint intervals each
    for window in (early, late):
        assert sum(len(cuts[n]) for n in window) / len(window) <= 3.5
        assert not any(r.kind == "LIST" for n in window for r in cuts[n])
    written = {w: sum(r.size for n in w if not is_base(n) for r in cuts[n]) for w in (early, late)}
    assert written[late] <= 1.05 * written[early]  # the same cuts cost the same bytes

    for number, (manifest, requests, results, dead) in resumes.items():
        assert metadata_reads(requests) == 2, number  # the best commit and its base
        assert Counter(r.kind for r in requests)["LIST"] <= 2  # commits/, segments/
        assert manifest.input_offset == sum(3 + (n % 7 == 0) for n in range(1, number + 1))
        expected = [f"r{n}-{j}" for n in range(1, number + 1) for j in range(3)]
        assert results == expected and dead == [f"d{n}" for n in range(7, number + 1, 7)]
    segment_files = {ref.path for ref in resumes[2000][0].segments if not ref.inline}
    assert len(segment_files) <= 2 * (MERGE_FACTOR - 1) * 3  # per kind, levels 0-2
    assert files(partition.part, "commits") <= 2 * CHECKPOINT_INTERVAL + 2  # pruned as it ran
    assert files(partition.part, "segments") <= 2 * len(segment_files)


async def test_killed_twice_and_resumed_the_rows_are_exact(tmp_path: Path) -> None:
    partition = Partition(tmp_path)
    number = 0
    for attempt, cuts in (("a1", 150), ("a2", 150), ("a3", 10)):
        resumed = partition.start_attempt(attempt)
        assert (resumed.input_offset if resumed else 0) == partition.offset
        for _ in range(cuts):
            number += 1
            await partition.cut(number)
    manifest, _, results, dead = partition.restored()
    assert manifest.epoch == number - 1 and manifest.attempt == "a3"
    assert results == partition.results and dead == partition.dead


async def test_a_namespace_written_in_format_1_is_resumed_and_continues_in_format_2(
    tmp_path: Path,
) -> None:
    partition = Partition(tmp_path)
    part, previous = partition.part, None
    for epoch in range(3):  # what an earlier version wrote: a whole manifest per cut
        ids = [f"old{epoch}"]
        ref = part.write_segment(pa.Table.from_batches([batch(ids)]), kind="results", attempt="a0")
        partition.results.extend(ids)
        partition.offset += 1
        if previous is None:
            manifest = Manifest("fp", 0, 0, partition.offset, "a0", segments=[ref])
        else:
            manifest = previous.advance(
                attempt="a0", input_offset=partition.offset, pending=[], new_segments=[ref]
            )
        previous = dataclasses.replace(manifest, committed_at=datetime.now(UTC))
        name = manifest_name(epoch, "a0", f"{epoch:08x}")
        write_atomically(partition.fs, f"{part.path}/manifests", name, previous.to_json_bytes())

    resumed = partition.start_attempt("a1")
    assert resumed == previous
    for number in range(1, 40):
        await partition.cut(number)
    manifest, _, results, dead = partition.restored()
    assert results == partition.results and dead == partition.dead
    assert manifest.attempt == "a1" and manifest.epoch == 2 + 39

    part.clean_unreferenced(grace=timedelta(0))  # the format-1 manifests are superseded
    assert files(part, "manifests") == 0
    assert partition.restored()[2] == partition.results


@pytest.mark.parametrize("damaged", ["newest", "base"])
async def test_a_corrupt_newest_commit_or_base_falls_back(tmp_path: Path, damaged: str) -> None:
    partition = Partition(tmp_path)
    partition.start_attempt("a1")
    offsets = {}
    for number in range(1, 41):  # bases at cuts 1 and 33
        await partition.cut(number)
        offsets[number] = partition.offset
    flip_middle_byte(partition.part, -1 if damaged == "newest" else -8)  # cut 40 or 33

    manifest, _, results, _ = partition.restored()
    fallback = 39 if damaged == "newest" else 32  # 32 survives the prune at base 33
    assert manifest.input_offset == offsets[fallback]
    assert results == [f"r{n}-{j}" for n in range(1, fallback + 1) for j in range(3)]


def test_concurrent_attempts_keep_each_others_commits_valid(tmp_path: Path) -> None:
    """Twins resumed from the same commit write, compact and prune at once: the one with
    most progress wins and the other's last commit still reads back whole."""
    partition = Partition(tmp_path)
    part = partition.part
    start = part.commit(Manifest("fp", 0, 0, 0, "a0"))
    barrier = threading.Barrier(2)

    def run(attempt: str, step: int) -> Manifest:
        writer = PartitionWriter(partition.fs, part.path, attempt, checkpoint_interval=3)
        manifest = start
        barrier.wait()
        for number in range(60):
            rows = pa.Table.from_batches([batch([f"{attempt}-{number}"])])
            nxt = manifest.advance(
                attempt=attempt, input_offset=manifest.input_offset + step, pending=[]
            )
            manifest = writer.commit(nxt, [("results", rows)])
        return manifest

    results: dict[str, Manifest] = {}
    threads = [
        threading.Thread(target=lambda a=a, s=s: results.__setitem__(a, run(a, s)))
        for a, s in (("a1", 2), ("a2", 3))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert part.latest() == results["a2"]
    for attempt, manifest in results.items():
        ids = [i for _, t in part.read_segments(manifest) for i in t.column("id").to_pylist()]
        assert ids == [f"{attempt}-{n}" for n in range(60)]


def test_cleanup_reads_two_commits_and_their_bases_never_a_segment(tmp_path: Path) -> None:
    partition = Partition(tmp_path)
    writer = PartitionWriter(partition.fs, partition.part.path, "a1", checkpoint_interval=8)
    manifest = Manifest("fp", 0, 0, 0, "a1")
    for number in range(300):
        rows = pa.Table.from_batches([batch([str(number)])])
        nxt = manifest.advance(attempt="a1", input_offset=number + 1, pending=[])
        manifest = writer.commit(nxt if number else manifest, [("results", rows)])
    before = len(partition.fs.requests)
    partition.part.clean_unreferenced(grace=timedelta(0))
    requests = partition.fs.requests[before:]
    assert metadata_reads(requests) <= 4
    assert not any(r.kind.startswith("GET") and "/segments/" in r.path for r in requests)
    assert partition.part.latest() == manifest


OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("cut"), st.integers(0, 3), st.integers(0, 2)),
        st.tuples(st.just("kill"), st.just(0), st.just(0)),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations=OPERATIONS, interval=st.integers(1, 4))
def test_any_cuts_compactions_and_kills_restore_exactly(
    operations: list[tuple[str, int, int]], interval: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        fs = CountingFileSystem()
        part = PartitionSnapshots(fs, f"{tmp}/part-00000", 0)
        committed: dict[str, list[str]] = {"results": [], "dead_letters": []}
        attempt, writer, manifest, offset = 0, None, None, 0
        for number, (operation, results, dead) in enumerate(operations):
            if operation == "kill" or writer is None:
                attempt += 1
                writer = PartitionWriter(fs, part.path, f"a{attempt}", interval)
                manifest = part.latest()
            if operation == "kill":
                continue
            offset += results + dead
            new = [
                (kind, pa.Table.from_batches([batch(ids, "E" if kind != "results" else None)]))
                for kind, ids in (
                    ("results", [f"r{number}-{j}" for j in range(results)]),
                    ("dead_letters", [f"d{number}-{j}" for j in range(dead)]),
                )
            ]
            if manifest is None:
                nxt = Manifest("fp", 0, 0, offset, f"a{attempt}")
            else:
                nxt = manifest.advance(attempt=f"a{attempt}", input_offset=offset, pending=[])
            manifest = writer.commit(nxt, new)
            for kind, table in new:
                committed[kind].extend(table.column("id").to_pylist())
        restored = part.latest()
        assert (restored.input_offset if restored else 0) == offset
        if restored is not None:
            found: dict[str, list[str]] = {"results": [], "dead_letters": []}
            for kind, table in part.read_segments(restored):
                found[kind].extend(table.column("id").to_pylist())
            assert found == committed
