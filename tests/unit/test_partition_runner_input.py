"""The partition's input as the operator sees it: indexes, watermarks, skip and admit."""

from __future__ import annotations

import pyarrow as pa

from spark_jobs.asyncwait import BoundedOutOfOrdernessGenerator, OperatorSnapshot, Watermark
from spark_jobs.partition_runner.input import InputRows, indexed_rows, with_watermarks
from spark_jobs.partition_runner.row_enrichment import EVENT_MS

SCHEMA = pa.schema([("id", pa.string()), (EVENT_MS, pa.int64())])


def batches(n: int, size: int) -> list[pa.RecordBatch]:
    rows = [{"id": f"k{i}", EVENT_MS: i * 1000} for i in range(n)]
    return [pa.RecordBatch.from_pylist(rows[i : i + size], SCHEMA) for i in range(0, n, size)]


def test_rows_are_numbered_across_batches() -> None:
    assert [(i, row["id"]) for i, row in indexed_rows(batches(5, 2))] == [
        (0, "k0"),
        (1, "k1"),
        (2, "k2"),
        (3, "k3"),
        (4, "k4"),
    ]


def test_without_a_generator_the_rows_pass_alone() -> None:
    rows = list(indexed_rows(batches(3, 3)))
    assert list(with_watermarks(iter(rows), None)) == rows


def test_watermarks_follow_every_nth_row_and_do_not_depend_on_row_changes() -> None:
    elements = with_watermarks(indexed_rows(batches(6, 4)), BoundedOutOfOrdernessGenerator(500, 3))
    seen = []
    for element in elements:
        if isinstance(element, tuple):
            element[1].clear()  # the row became an output row meanwhile
            seen.append(element[0])
        else:
            seen.append(element)
    assert seen == [0, 1, 2, Watermark(1500), 3, 4, 5, Watermark(4500)]


def test_skip_advances_to_the_offset_and_keeps_only_pending_rows() -> None:
    inputs = InputRows()
    elements = iter([(0, {"id": "a"}), Watermark(1), (1, {"id": "b"}), (2, {"id": "c"})])
    restored = OperatorSnapshot([{"record": 1, "attempts": 2}, {"watermark": 1}], consumed=3)
    inputs.skip(elements, restored)
    assert len(inputs) == 1 and inputs[1] == {"id": "b"}
    assert next(elements) == (2, {"id": "c"})  # the input goes on after the offset


def test_admit_gives_indexes_keeps_rows_and_stops_when_told() -> None:
    inputs = InputRows()
    spent, ended = False, []
    elements = iter([(0, {"id": "a"}), Watermark(5), (1, {"id": "b"})])
    source = inputs.admit(elements, lambda: spent, lambda: ended.append(True))
    assert next(source) == 0 and inputs[0] == {"id": "a"}
    assert next(source) == Watermark(5)
    spent = True
    assert list(source) == []
    assert len(inputs) == 1
    assert inputs.pop(0) == {"id": "a"} and len(inputs) == 0
    assert ended == []  # stopped early: the input did not end


def test_admit_says_when_the_input_has_ended() -> None:
    inputs, ended = InputRows(), []
    source = inputs.admit(iter([(0, {"id": "a"})]), lambda: False, lambda: ended.append(True))
    assert next(source) == 0 and ended == []
    assert list(source) == [] and ended == [True]
