"""The snapshot committer and the replay of what it committed, on a real local store."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pyarrow as pa
import pytest

from spark_jobs.asyncwait import OperatorSnapshot
from spark_jobs.partition_runner.cache_scope import scope_of
from spark_jobs.partition_runner.committer import Cut, CutPolicy, SnapshotCommitter
from spark_jobs.partition_runner.epoch import Epoch
from spark_jobs.partition_runner.replay import pending_outcomes, replay
from spark_jobs.partition_runner.response_cache import ResponseCache
from spark_jobs.partition_runner.task import PartitionTask
from spark_jobs.snapshots import LeaseError, Manifest, NamespaceKey, SnapshotStore

SCHEMA = pa.schema([("id", pa.string()), ("score", pa.float64()), ("_error", pa.string())])
TASK = PartitionTask(partition=0, attempt="a0", records_total=10, fingerprint="fp")


def batch(*ids: str, error: str | None = None) -> pa.RecordBatch:
    rows = [{"id": i, "score": None if error else 1.0, "_error": error} for i in ids]
    return pa.RecordBatch.from_pylist(rows, schema=SCHEMA)


def cut(offset: int, results: list[str], failed: tuple[str, ...] = (), watermark: int = 0) -> Cut:
    epoch = Epoch(
        results=[batch(*results)] if results else [],
        dead_letters=[batch(*failed, error="ValueError: bad")] if failed else [],
    )
    snapshot = OperatorSnapshot([{"record": offset, "attempts": 1}], consumed=offset)
    return Cut(snapshot, epoch, {"finished": False}, watermark)


@pytest.fixture
def store(tmp_path: Path):
    return SnapshotStore(str(tmp_path)).partition(NamespaceKey("d", "t", "i"), 0)


def committer(store, check_lease=lambda: None, resumed=None, **policy) -> SnapshotCommitter:
    policy = CutPolicy(**{"interval": 3600.0, "max_rows": 3, **policy})
    recorder = store.attempt_ledger().recorder(0, TASK.attempt, TASK.run_id)
    return SnapshotCommitter(store, SCHEMA, TASK, resumed, policy, check_lease, recorder)


async def test_cuts_chain_epochs_segments_first_then_the_manifest(store) -> None:
    writer = committer(store)
    writer.start(cut(2, ["a"], ("b",), watermark=5))
    await writer.wait()
    first = store.latest()
    assert (first.epoch, first.input_offset, first.watermark) == (0, 2, 5)
    assert [s.kind for s in first.segments] == ["results", "dead_letters"]
    assert list(first.pending) == [{"record": 2, "attempts": 1}]
    writer.start(cut(4, ["c"]))
    await writer.wait()
    second = store.latest()
    assert second.epoch == 1 and len(second.segments) == 3 and writer.last_committed == second
    assert (second.committed_rows, second.dead_letter_rows) == (2, 1)


async def test_an_empty_epoch_commits_a_manifest_without_segments(store) -> None:
    writer = committer(store)
    writer.start(cut(0, []))
    await writer.wait()
    assert store.latest().segments == ()


def test_a_cut_is_due_by_rows_or_by_time(store) -> None:
    assert not committer(store).due(epoch_rows=2)
    assert committer(store).due(epoch_rows=3)
    assert committer(store, interval=0.0).due(epoch_rows=0)


async def test_one_write_at_a_time_and_the_next_cut_waits_for_it(store) -> None:
    release = threading.Event()
    writer = committer(store, check_lease=release.wait, interval=0.0)
    writer.start(cut(1, ["a"]))
    assert not writer.due(epoch_rows=100)  # the write is in flight
    release.set()
    await writer.wait()
    assert writer.due(epoch_rows=0)


async def test_a_fenced_off_write_fails_the_attempt_and_commits_nothing(store) -> None:
    def fenced() -> None:
        raise LeaseError("fenced off")

    writer = committer(store, check_lease=fenced)
    writer.start(cut(1, ["a"]))
    with pytest.raises(LeaseError):
        await writer.wait()
    assert store.latest() is None


async def test_settle_lets_a_started_write_finish_without_raising(store) -> None:
    release = threading.Event()
    writer = committer(store, check_lease=release.wait)
    writer.start(cut(1, ["a"]))
    settling = asyncio.ensure_future(writer.settle())
    await asyncio.sleep(0.05)
    assert not settling.done()
    release.set()
    await settling
    assert store.latest().input_offset == 1


async def test_replay_gives_back_the_committed_segments_in_order_in_the_output_schema(
    store,
) -> None:
    writer = committer(store)
    writer.start(cut(2, ["a", "b"], ("x",)))
    await writer.wait()
    writer.start(cut(3, ["c"]))
    await writer.wait()
    replayed = [b async for b in replay(store, SCHEMA, store.latest())]
    assert [r["id"] for b in replayed for r in b.to_pylist()] == ["a", "b", "x", "c"]
    assert all(b.schema == SCHEMA for b in replayed)


def test_pending_outcomes_counts_entries_that_will_not_be_called_again() -> None:
    manifest = Manifest(
        "fp",
        0,
        1,
        5,
        "a0",
        pending=[
            {"record": 1, "attempts": 1, "value": {"score": 1}},
            {"record": 2, "attempts": 1, "error": "ValueError: bad"},
            {"record": 3, "attempts": 0},
            {"watermark": 4},
        ],
    )
    assert pending_outcomes(manifest) == 2


async def test_a_cut_takes_the_caches_new_answers_and_writes_them_with_the_snapshot(
    store, tmp_path
) -> None:
    scope = scope_of(b"key", {}, [])
    cache = ResponseCache(
        str(tmp_path / "cache"), partition=0, partitions=1, ttl_s=3600, scope=scope
    )
    writer = committer(store)
    writer.stored = cache
    for key in ("a", "b"):
        cache.put("GET", f"http://api/{key}", None, b"{}")
    writer.start(cut(2, ["a", "b"]))
    assert cache.held == 0  # taken at the cut's instant, not when the write ends
    cache.put("GET", "http://api/c", None, b"{}")  # a call that ends while the cut is written
    await writer.wait()
    assert (cache.files_written, cache.stored, cache.held) == (1, 2, 1)
    writer.start(cut(3, ["c"]))
    await writer.wait()
    assert (cache.files_written, cache.stored, cache.held, cache.most_held) == (2, 3, 0, 2)
    assert store.latest().epoch == 1


async def test_the_answers_of_a_cut_are_kept_even_when_its_commit_fails(store, tmp_path) -> None:
    def fenced_off() -> None:
        raise LeaseError("fenced off")

    scope = scope_of(b"key", {}, [])
    cache = ResponseCache(
        str(tmp_path / "cache"), partition=0, partitions=1, ttl_s=3600, scope=scope
    )
    writer = committer(store, check_lease=fenced_off)
    writer.stored = cache
    cache.put("GET", "http://api/a", None, b"{}")
    writer.start(cut(1, ["a"]))
    with pytest.raises(LeaseError):
        await writer.wait()
    assert store.latest() is None and cache.files_written == 1  # paid for all the same
