"""The partition runner's epoch buffer: output rows, batches for Spark, the epoch by kind."""

from __future__ import annotations

import pyarrow as pa

from spark_jobs.asyncwait import Failure, Result
from spark_jobs.partition_runner.epoch import OUTPUT_BATCH_ROWS, EpochBuffer, output_row
from spark_jobs.partition_runner.row_enrichment import EVENT_MS

SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("score", pa.float64()),
        ("_error", pa.string()),
        ("_attempts", pa.int64()),
    ]
)


def test_an_output_row_drops_helper_columns_and_carries_the_outcome() -> None:
    row = {"id": "a", EVENT_MS: 5}
    assert output_row(row, Result(0, {"score": 1.5}, 2), ["score"]) == {
        "id": "a",
        "score": 1.5,
        "_error": None,
        "_attempts": 2,
    }
    failed = output_row({"id": "b"}, Failure(1, "ValueError: bad", 1), ["score"])
    assert failed == {"id": "b", "score": None, "_error": "ValueError: bad", "_attempts": 1}


def test_flush_makes_one_batch_and_files_it_in_the_epoch_by_kind() -> None:
    buffer = EpochBuffer(SCHEMA, ["score"])
    buffer.add({"id": "a"}, Result(0, {"score": 1.0}))
    buffer.add({"id": "b"}, Failure(1, "ValueError: bad", 1))
    buffer.add({"id": "c"}, Result(2, {"score": 3.0}))
    batch = buffer.flush()
    assert batch.column("id").to_pylist() == ["a", "b", "c"] and buffer.rows == []
    epoch = buffer.take_epoch()
    assert epoch.rows == 3
    assert [r["id"] for b in epoch.results for r in b.to_pylist()] == ["a", "c"]
    assert [r["id"] for b in epoch.dead_letters for r in b.to_pylist()] == ["b"]
    assert buffer.epoch.rows == 0  # the next epoch starts empty


def test_a_batch_is_full_at_the_output_batch_size() -> None:
    buffer = EpochBuffer(SCHEMA, ["score"])
    for n in range(OUTPUT_BATCH_ROWS - 1):
        buffer.add({"id": str(n)}, Result(n, {"score": 0.0}))
    assert not buffer.batch_full
    buffer.add({"id": "last"}, Result(-1, {"score": 0.0}))
    assert buffer.batch_full
