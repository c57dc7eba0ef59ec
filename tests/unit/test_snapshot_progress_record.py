"""The namespace's progress record (``snapshots/progress.py``) and the driver's fold of
it (``driver/progress.py``), against real manifests in a real local store."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from spark_jobs.asyncwait import MIN_WATERMARK, Watermark, WatermarkStatus, WatermarkValve
from spark_jobs.driver.progress import ProgressFolder
from spark_jobs.enrichers import call_outcomes
from spark_jobs.snapshots import Manifest, NamespaceKey, SnapshotStore
from spark_jobs.snapshots.contracts import MAX_OUTCOMES_STORED
from spark_jobs.snapshots.progress import (
    CALLS_WINDOW_S,
    MAX_RECORD_BYTES,
    OTHER_OUTCOMES,
    PartitionEntry,
    ProgressRecord,
    ProgressRecordError,
    merge_outcomes,
)
from spark_jobs.snapshots.store import PROGRESS_RECORD

KEY = NamespaceKey("d", "t", "2026-11-20T00:00:00+00:00")


def entry(partition: int, **changes) -> PartitionEntry:
    base = PartitionEntry(
        partition=partition,
        epoch=3,
        input_offset=120,
        records_total=1_000,
        committed_rows=100,
        dead_letter_rows=2,
        in_flight=18,
        watermark=1_763_600_000_000 + partition,
        committed_at_ms=1_763_600_000_123,
        attempt=f"s1-t{partition}-a0",
        run_id="run-1",
        requests_made=130,
        replayed=5,
        rss_mb_peak=88.5,
    )
    return replace(base, **changes)


def record_of(count: int, **changes) -> ProgressRecord:
    fields = {
        "run_id": "run-1",
        "written_at_ms": 1_763_600_001_000,
        "partition_count": count,
        "records_total": 1_000 * count,
        "partitions": tuple(entry(n) for n in range(count)),
    }
    return ProgressRecord(**{**fields, **changes})


def test_a_record_round_trips_and_stays_compact() -> None:
    record = record_of(
        3,
        corrupt_partitions=(7,),
        partitions=(
            entry(0, finished=True, watermark=None),
            entry(1, systemic_failure="partition 1: systemic failure: 401"),
            entry(2, budget_exhausted=True, resumed=True),
        ),
    )
    assert ProgressRecord.from_json(record.to_json()) == record
    big = record_of(10_000).to_json()
    assert len(big) < 180 * 10_000, "a partition is one short array"
    assert ProgressRecord.from_json(big).done == 10_000 * 102


def test_totals_and_the_line_readers_show() -> None:
    record = record_of(2, partitions=(entry(0, finished=True, in_flight=0), entry(1)))
    assert (record.done, record.in_flight, record.epoch) == (204, 18, 3)
    assert record.describe() == "epoch 3: 204 of 2 000 records committed, 18 in flight"
    assert entry(0).stats == {
        "run_id": "run-1",
        "finished": False,
        "budget_exhausted": False,
        "batches_running": False,
        "resumed": False,
        "requests_made": 130,
        "response_cache_hits": 0,
        "coalesced_calls": 0,
        "cache_hits": 0,
        "replayed": 5,
        "rss_mb_peak": 88.5,
    }


THROTTLED = {"429 rate_limit_exceeded": 480}


def test_recent_calls_round_trip_beside_the_columns_an_earlier_reader_checks() -> None:
    record = record_of(2, recent_calls=THROTTLED)
    assert ProgressRecord.from_json(record.to_json()) == record
    document = json.loads(record.to_json())
    assert document["columns"] == json.loads(record_of(2).to_json())["columns"]
    del document["recent_calls"]  # as a record of an earlier version
    assert ProgressRecord.from_json(json.dumps(document).encode()).recent_calls == {}


@pytest.mark.parametrize(
    ("calls", "in_flight", "line"),
    [
        (
            THROTTLED,
            18,
            "; all 480 calls of the last 60 s answered 429 rate_limit_exceeded; retrying",
        ),
        (
            {"429 rate_limit_exceeded": 3000, "503": 1000},
            18,
            "; all 4 000 calls of the last 60 s failed: 3 000 429 rate_limit_exceeded, "
            "1 000 503; retrying",
        ),
        (
            {"200": 380, "429 rate_limit_exceeded": 32},
            18,
            "; last 60 s: 412 calls, 380 answered 200, 32 429 rate_limit_exceeded",
        ),
        (THROTTLED, 0, "; all 480 calls of the last 60 s answered 429 rate_limit_exceeded"),
        ({"200": 4000}, 18, ""),
        ({}, 18, ""),
    ],
    ids=["throttled", "failing", "some-answered", "none-in-flight", "all-answered", "no-calls"],
)
def test_the_line_says_what_the_calls_of_the_last_minute_got(calls, in_flight, line) -> None:
    record = record_of(1, partitions=(entry(0, in_flight=in_flight),), recent_calls=calls)
    assert record.describe_calls() == line


def test_partitions_calls_add_up_and_a_crowd_of_outcomes_is_capped() -> None:
    assert merge_outcomes([THROTTLED, {"429 rate_limit_exceeded": 20, "200": 5}]) == {
        "429 rate_limit_exceeded": 500,
        "200": 5,
    }
    crowd = merge_outcomes([{f"400 code_{p}_{n}": 1 + n for n in range(9)} for p in range(50)])
    assert len(crowd) == MAX_OUTCOMES_STORED and sum(crowd.values()) == 50 * 45
    assert (
        ProgressRecord.from_json(record_of(1, recent_calls=crowd).to_json()).recent_calls == crowd
    )


def test_the_record_and_the_enrichers_count_over_one_window_and_name_the_rest_alike() -> None:
    assert CALLS_WINDOW_S == call_outcomes.WINDOW_S and OTHER_OUTCOMES == call_outcomes.OTHER
    assert call_outcomes.MAX_OUTCOMES + 1 <= MAX_OUTCOMES_STORED


def _valve(parts: list[tuple[int, int | None, bool]], count: int) -> int | None:
    """What the summary computed before: the valve over every channel (quadratic)."""
    if not any(mark is not None for _, mark, _ in parts):
        return None
    valve = WatermarkValve(count)
    for number, mark, _ in parts:
        if mark is not None:
            valve.input_watermark(Watermark(mark), number)
    present = {number: finished for number, _, finished in parts}
    for channel in range(count):
        if present.get(channel, True):
            valve.input_status(WatermarkStatus.IDLE, channel)
    out = valve.last_output_watermark
    return None if out == MIN_WATERMARK else out


def test_the_combined_watermark_is_the_valves_in_one_pass() -> None:
    rng = random.Random(22)
    for _ in range(2_000):
        count = rng.randint(1, 6)
        numbers = sorted(rng.sample(range(count), rng.randint(0, count)))
        parts = [(n, rng.choice([None, rng.randint(0, 5)]), rng.random() < 0.5) for n in numbers]
        record = record_of(
            count,
            partitions=tuple(entry(n, watermark=m, finished=f) for n, m, f in parts),
        )
        assert record.watermark() == _valve(parts, count), parts


def _stored(record: ProgressRecord) -> dict:
    return json.loads(record.to_json())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(format_version=1), "format_version 1 is not 2"),
        (lambda d: d.pop("run_id"), "run_id: expected str"),
        (lambda d: d.update(partition_count="4"), "partition_count: expected int"),
        (lambda d: d.update(columns=["partition"]), "columns: expected the 22 column names"),
        (lambda d: d.update(partitions={}), "partitions: expected list"),
        (
            lambda d: d["partitions"][1].__setitem__(1, "3"),
            r"\[1\] \(partition 1\)\.epoch",
        ),
        (
            lambda d: d["partitions"][0].__setitem__(9, 7),
            r"\[0\] \(partition 0\)\.attempt",
        ),
        (lambda d: d["partitions"][0].__setitem__(6, -1), r"\.in_flight: unexpected value -1"),
        (lambda d: d["partitions"][0].__setitem__(11, 1), r"\.finished: unexpected value 1"),
        (lambda d: d["partitions"][0].__setitem__(7, 2**70), r"\.watermark"),
        (lambda d: d["partitions"][0].pop(), r"partitions\[0\]: expected a list of 22"),
        (lambda d: d["partitions"].append(d["partitions"][0]), "ascending order without repeats"),
        (lambda d: d.update(corrupt_partitions=[True]), r"corrupt_partitions\[0\]"),
        (lambda d: d.update(recent_calls=[1]), "recent_calls: expected at most 16 short names"),
        (lambda d: d.update(recent_calls={"x" * 81: 1}), "recent_calls: expected"),
        (lambda d: d.update(recent_calls={f"{n}": 1 for n in range(17)}), "recent_calls"),
        (lambda d: d.update(recent_calls={"429": -1}), "recent_calls"),
    ],
)
def test_a_record_of_the_wrong_shape_is_refused_naming_what(change, message) -> None:
    document = _stored(record_of(2))
    change(document)
    with pytest.raises(ProgressRecordError, match=message):
        ProgressRecord.from_json(json.dumps(document).encode())


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not valid JSON"),
        (record_of(3).to_json()[:-40], "not valid JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"format_version": NaN}', "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b" " * (MAX_RECORD_BYTES + 1), "over"),
    ],
    ids=["empty", "truncated", "list", "nan", "deep", "binary", "huge"],
)
def test_garbage_is_refused_with_a_clear_error(data: bytes, message: str) -> None:
    with pytest.raises(ProgressRecordError, match=message):
        ProgressRecord.from_json(data)


def test_the_store_reads_a_huge_record_no_further_than_its_limit(tmp_path) -> None:
    store = SnapshotStore(str(tmp_path))
    assert store.progress_record(KEY) is None
    path = tmp_path / "d" / "t" / "2026-11-20T00%3A00%3A00%2B00%3A00" / PROGRESS_RECORD
    path.parent.mkdir(parents=True)
    with path.open("wb") as handle:
        handle.truncate(4 * MAX_RECORD_BYTES)  # sparse: cheap to make, costly to read whole
    with pytest.raises(ProgressRecordError, match=f"{MAX_RECORD_BYTES + 1} bytes or more"):
        store.progress_record(KEY)


def commit(store: SnapshotStore, partition: int, rows: int, epoch: int, **stats) -> None:
    part = store.partition(KEY, partition)
    ref = part.write_segment(pa.table({"id": list(range(rows))}), kind="results", attempt="a")
    part.commit(
        Manifest("f", partition, epoch, rows, "a", segments=[ref], records_total=1_000, stats=stats)
    )


def test_the_fold_reads_a_partition_settled_in_this_run_no_more(tmp_path, monkeypatch) -> None:
    store = SnapshotStore(str(tmp_path))
    folder = ProgressFolder(store, KEY, "run-2", partition_count=3, records_total=3_000)
    commit(store, 0, rows=1_000, epoch=9, finished=True, run_id="run-1")  # an earlier run's
    commit(store, 1, rows=10, epoch=0, run_id="run-2")
    read: list[int] = []
    latest = type(store.partition(KEY, 0)).latest

    def counted(self, **kwargs):
        read.append(self.partition)
        return latest(self, **kwargs)

    monkeypatch.setattr(type(store.partition(KEY, 0)), "latest", counted)
    assert folder.refresh().done == 1_010 and sorted(read) == [0, 1]
    commit(store, 0, rows=1_000, epoch=10, finished=True, run_id="run-2", replayed=1_000)
    commit(store, 1, rows=500, epoch=1, budget_exhausted=True, run_id="run-2")
    read.clear()
    record = folder.refresh()
    assert sorted(read) == [0, 1] and record.done == 1_500
    assert record.partitions[0].replayed == 1_000
    read.clear()
    commit(store, 2, rows=5, epoch=0, run_id="run-2")
    record = folder.refresh()
    assert read == [2], "partitions 0 and 1 ended in this run: not read again"
    assert store.progress_record(KEY) == record
    assert [p.partition for p in record.partitions] == [0, 1, 2]


def test_a_partition_with_only_broken_commits_is_recorded_corrupt(tmp_path) -> None:
    store = SnapshotStore(str(tmp_path))
    commit(store, 0, rows=3, epoch=0)
    commit(store, 1, rows=3, epoch=0)
    [committed] = Path(store.partition(KEY, 1).path).glob("commits/*.snap")
    committed.write_bytes(b'{"format_version": 2, "epoch": NaN}')
    record = ProgressFolder(store, KEY, "r", 2, None).refresh()
    assert [p.partition for p in record.partitions] == [0] and record.corrupt_partitions == (1,)


def test_a_run_that_lost_its_lease_writes_no_progress(tmp_path) -> None:
    store = SnapshotStore(str(tmp_path))
    commit(store, 0, rows=3, epoch=0)
    record = ProgressFolder(store, KEY, "r", 1, 3, holds=lambda: False).refresh()
    assert record.done == 3 and store.progress_record(KEY) is None
