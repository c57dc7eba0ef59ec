"""Sample input for the enrichment pipeline: one day of customer events.

The data is shaped like the real input the pipeline has to cope with, so demos show
the interesting cases rather than only the happy path:

* ``id`` repeats (``--duplicate-rate``), which is what makes caching and de-duplicated
  API calls pay off;
* ``event_time`` mostly increases but with small disorder, as events arrive late;
* ``--bad-rows`` records are broken on purpose (null id, unparseable timestamp and, for
  JSONL, a malformed line) so quarantining can be demonstrated.

Everything is drawn from one ``random.Random(seed)``: the same arguments give the same
file, byte for byte, so tests and benchmarks can compare runs.

Both formats store ``event_time`` as an ISO-8601 string: a typed timestamp column could
not hold the unparseable value that the bad rows need.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

FORMATS = ("jsonl", "parquet")
DEFAULT_DATE = "2024-01-01"  # fixed rather than "today": output must not depend on the clock
BAD_EVENT_TIME = "not-a-timestamp"
MALFORMED_KEY = "_malformed_json"
"""A row holding only this key is written verbatim as a broken JSONL line."""

_SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".parquet": "parquet"}
_SCHEMA = pa.schema([("id", pa.string()), ("event_time", pa.string()), ("amount", pa.float64())])
# How far (in average gaps between events) a timestamp may stray from its slot.
_DISORDER_SLOTS = 3.0


def generate_rows(
    rows: int,
    seed: int = 0,
    duplicate_rate: float = 0.0,
    bad_rows: int = 0,
    date: str = DEFAULT_DATE,
    *,
    malformed_json: bool = False,
) -> list[dict[str, Any]]:
    """``rows`` records for ``date``, of which ``bad_rows`` are broken on purpose.

    Bad rows cycle through: null ``id``, unparseable ``event_time`` and, only when
    ``malformed_json`` (JSONL output), a row written as a truncated JSON line. Each
    non-first row reuses an earlier id with probability ``duplicate_rate``.
    """
    if rows < 0 or not 0 <= bad_rows <= rows:
        raise ValueError(f"need 0 <= bad_rows <= rows, got rows={rows}, bad_rows={bad_rows}")
    if not 0 <= duplicate_rate <= 1:
        raise ValueError(f"duplicate_rate must be in [0, 1], got {duplicate_rate}")
    try:
        day = dt.datetime.combine(dt.date.fromisoformat(date), dt.time(), tzinfo=dt.UTC)
    except ValueError as exc:
        raise ValueError(f"date must be a valid YYYY-MM-DD, got {date!r}") from exc
    rng = random.Random(seed)
    gap_s = 86_400 / max(rows, 1)
    seen: list[str] = []
    records = []
    for i in range(rows):
        if seen and rng.random() < duplicate_rate:
            customer_id = rng.choice(seen)
        else:
            customer_id = f"c{len(seen):06d}"
            seen.append(customer_id)
        slot_s = (i + 0.5 + rng.uniform(-_DISORDER_SLOTS, _DISORDER_SLOTS)) * gap_s
        offset_s = min(max(slot_s, 0.0), 86_400 - 0.001)  # stay within the day
        event_time = day + dt.timedelta(seconds=offset_s)
        records.append(
            {
                "id": customer_id,
                "event_time": event_time.isoformat(timespec="milliseconds"),
                "amount": round(rng.lognormvariate(3.0, 1.0), 2),
            }
        )
    breakers = [_null_id, _bad_event_time] + ([_truncate] if malformed_json else [])
    for n, i in enumerate(sorted(rng.sample(range(rows), bad_rows))):
        records[i] = breakers[n % len(breakers)](records[i])
    return records


def _null_id(record: dict[str, Any]) -> dict[str, Any]:
    return {**record, "id": None}


def _bad_event_time(record: dict[str, Any]) -> dict[str, Any]:
    return {**record, "event_time": BAD_EVENT_TIME}


def _truncate(record: dict[str, Any]) -> dict[str, Any]:
    line = json.dumps(record)
    return {MALFORMED_KEY: line[: len(line) // 2]}


def write(rows: list[dict[str, Any]], path: str | Path, fmt: str) -> None:
    """Write ``rows`` to ``path`` atomically (a reader never sees a half-written file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    if fmt == "jsonl":
        with tmp.open("w", encoding="utf-8") as out:
            for row in rows:
                out.write((row[MALFORMED_KEY] if MALFORMED_KEY in row else json.dumps(row)) + "\n")
    elif fmt == "parquet":
        if any(MALFORMED_KEY in row for row in rows):
            raise ValueError("parquet cannot hold malformed JSON lines")
        pq.write_table(pa.Table.from_pylist(rows, schema=_SCHEMA), tmp)
    else:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    os.replace(tmp, path)


def infer_format(path: str | Path) -> str:
    """The output format implied by the file suffix, so ``--format`` is rarely needed."""
    suffix = Path(path).suffix.lower()
    if suffix not in _SUFFIXES:
        raise ValueError(f"cannot infer the format of {path}; pass --format {'|'.join(FORMATS)}")
    return _SUFFIXES[suffix]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m demo.generate",
        description="Write deterministic sample input records (id, event_time, amount).",
    )
    parser.add_argument("--rows", type=int, required=True, help="number of records")
    parser.add_argument("--out", required=True, help="output file (.jsonl or .parquet)")
    parser.add_argument("--format", choices=FORMATS, help="default: inferred from --out")
    parser.add_argument("--seed", type=int, default=0, help="default: %(default)s")
    parser.add_argument(
        "--duplicate-rate", type=float, default=0.0, help="chance a row repeats an earlier id"
    )
    parser.add_argument("--bad-rows", type=int, default=0, help="number of broken records")
    parser.add_argument("--date", default=DEFAULT_DATE, help="day of the events (%(default)s)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        fmt = args.format or infer_format(args.out)
        rows = generate_rows(
            args.rows,
            args.seed,
            args.duplicate_rate,
            args.bad_rows,
            args.date,
            malformed_json=fmt == "jsonl",
        )
    except ValueError as exc:
        parser.error(str(exc))
    write(rows, args.out, fmt)
    ids = [row.get("id") for row in rows]
    repeats = sum(1 for i in ids if i is not None) - len(set(ids) - {None})
    print(
        f"demo.generate: wrote {len(rows)} rows ({repeats} repeated ids, "
        f"{args.bad_rows} bad) to {args.out} as {fmt}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
