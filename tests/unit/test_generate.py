"""The sample data generator: determinism, shape, duplicates and deliberately bad rows."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from demo.generate import (
    BAD_EVENT_TIME,
    MALFORMED_KEY,
    generate_rows,
    infer_format,
    main,
    write,
)

DATE = "2024-03-05"


def parse_time(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value)


def test_same_seed_same_rows_other_seed_other_rows() -> None:
    first = generate_rows(500, seed=7, duplicate_rate=0.2, bad_rows=5, date=DATE)
    assert first == generate_rows(500, seed=7, duplicate_rate=0.2, bad_rows=5, date=DATE)
    assert first != generate_rows(500, seed=8, duplicate_rate=0.2, bad_rows=5, date=DATE)


def test_good_rows_have_the_documented_shape() -> None:
    rows = generate_rows(1000, seed=1, duplicate_rate=0.0, bad_rows=0, date=DATE)
    day = dt.date.fromisoformat(DATE)
    times = [parse_time(r["event_time"]) for r in rows]
    assert all(set(r) == {"id", "event_time", "amount"} for r in rows)
    assert all(re.fullmatch(r"c\d{6}", r["id"]) for r in rows)
    assert len({r["id"] for r in rows}) == 1000
    assert all(isinstance(r["amount"], float) and r["amount"] > 0 for r in rows)
    assert all(t.date() == day and t.tzinfo is not None for t in times)
    # Roughly increasing: some disorder, but never far from sorted.
    assert times != sorted(times)
    assert sum(a <= b for a, b in itertools.pairwise(times)) > 0.6 * len(times)
    assert max(abs(t - s) for t, s in zip(times, sorted(times), strict=True)) < dt.timedelta(
        minutes=10
    )


def test_duplicate_rate_repeats_earlier_ids() -> None:
    rows = generate_rows(2000, seed=3, duplicate_rate=0.3, bad_rows=0, date=DATE)
    ids = [r["id"] for r in rows]
    repeated = len(ids) - len(set(ids))
    assert 0.25 * len(ids) < repeated < 0.35 * len(ids)


def test_bad_rows_cycle_through_the_kinds() -> None:
    rows = generate_rows(100, 5, 0.1, bad_rows=6, date=DATE, malformed_json=True)
    null_ids = [r for r in rows if "id" in r and r["id"] is None]
    bad_times = [r for r in rows if r.get("event_time") == BAD_EVENT_TIME]
    malformed = [r for r in rows if MALFORMED_KEY in r]
    assert (len(null_ids), len(bad_times), len(malformed)) == (2, 2, 2)
    assert len(rows) == 100


def test_parquet_rows_never_include_malformed_lines() -> None:
    rows = generate_rows(50, seed=5, duplicate_rate=0.0, bad_rows=9, date=DATE)
    assert not any(MALFORMED_KEY in r for r in rows)
    assert (
        sum(r["id"] is None for r in rows) + sum(r["event_time"] == BAD_EVENT_TIME for r in rows)
        == 9
    )


@settings(max_examples=50, deadline=None)
@given(
    rows=st.integers(0, 200),
    bad_fraction=st.floats(0, 1),
    duplicate_rate=st.floats(0, 1),
    seed=st.integers(0, 2**32),
)
def test_row_and_bad_row_counts_are_exact(
    rows: int, bad_fraction: float, duplicate_rate: float, seed: int
) -> None:
    bad = int(rows * bad_fraction)
    generated = generate_rows(rows, seed, duplicate_rate, bad, DATE, malformed_json=True)
    broken = [
        r
        for r in generated
        if MALFORMED_KEY in r or r["id"] is None or r["event_time"] == BAD_EVENT_TIME
    ]
    assert len(generated) == rows
    assert len(broken) == bad


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rows": 3, "bad_rows": 4}, "bad_rows"),
        ({"rows": 3, "duplicate_rate": 1.5}, "duplicate_rate"),
        ({"rows": 3, "date": "2024-13-01"}, "YYYY-MM-DD"),
    ],
)
def test_invalid_arguments_are_rejected(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        generate_rows(**kwargs)


def test_jsonl_has_one_line_per_row_and_a_malformed_line(tmp_path: Path) -> None:
    rows = generate_rows(30, seed=2, duplicate_rate=0.1, bad_rows=3, date=DATE, malformed_json=True)
    path = tmp_path / "nested" / "input.jsonl"
    write(rows, path, "jsonl")
    lines = path.read_text().splitlines()
    assert len(lines) == 30
    parsed, broken = [], 0
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError:
            broken += 1
    assert broken == 1
    assert parsed == [r for r in rows if MALFORMED_KEY not in r]
    assert list(tmp_path.joinpath("nested").iterdir()) == [path]  # no temp file left behind


def test_parquet_round_trips(tmp_path: Path) -> None:
    rows = generate_rows(40, seed=2, duplicate_rate=0.1, bad_rows=2, date=DATE)
    path = tmp_path / "input.parquet"
    write(rows, path, "parquet")
    table = pq.read_table(path)
    assert table.column_names == ["id", "event_time", "amount"]
    assert table.to_pylist() == rows


def test_parquet_refuses_malformed_rows(tmp_path: Path) -> None:
    rows = generate_rows(3, seed=0, bad_rows=3, malformed_json=True)
    with pytest.raises(ValueError, match="malformed"):
        write(rows, tmp_path / "x.parquet", "parquet")


def test_format_is_inferred_from_the_suffix() -> None:
    assert infer_format("a/b.jsonl") == "jsonl"
    assert infer_format("b.PARQUET") == "parquet"
    with pytest.raises(ValueError, match="--format"):
        infer_format("b.csv")


def test_cli_writes_the_same_file_for_the_same_seed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--rows", "200", "--seed", "9", "--duplicate-rate", "0.2", "--bad-rows", "3"]
    assert main([*args, "--out", str(tmp_path / "a.jsonl"), "--date", DATE]) == 0
    assert main([*args, "--out", str(tmp_path / "b.jsonl"), "--date", DATE]) == 0
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    summary = capsys.readouterr().out.splitlines()
    assert len(summary) == 2
    assert summary[0].startswith("demo.generate: wrote 200 rows (")
    assert "3 bad" in summary[0]
    assert summary[0].endswith("as jsonl")


def test_cli_help_and_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as help_exit:
        main(["--help"])
    assert help_exit.value.code == 0
    assert "--duplicate-rate" in capsys.readouterr().out
    with pytest.raises(SystemExit) as bad_exit:
        main(["--rows", "5", "--out", str(tmp_path / "x.csv")])
    assert bad_exit.value.code == 2
    assert "--format" in capsys.readouterr().err
