"""``make bench-jvm``: what the driver JVM's JIT choice (``ENRICH_JVM_JIT``,
``spark_jobs/session/jvm.py``) costs and buys, each setting in turn, back to back.

Two measurements per setting and round, each a process of its own launched as a user
launches the job (``python -m``, Spark ``local[2]``, the class archive mapped when
``make jvm-archive`` wrote one):

- **the first call**: ``python -m spark_jobs.enrich_job`` over ``BENCH_JVM_RECORDS``
  (1 500) records in 2 partitions of 8 calls in flight against ``peers/server.py`` (20 ms
  an answer): seconds from the launch to the first request the server saw, and to the
  process's exit;
- **the JVM's own work**: a session opened as the job opens one (``spark_session``), then
  ``BENCH_JVM_ROWS`` (2 000 000) JSON rows read, counted, shuffled (hash-partitioned by
  key), sorted within partitions, passed through ``mapInArrow`` and written as Parquet:
  seconds of that work, the session's start apart.

``BENCH_JVM_SETTINGS`` (``full,quick``) and ``BENCH_JVM_ROUNDS`` (2) choose what runs; the
settings take turns within each round. Results: ``benchmarks/results/jvm_defaults.json``
(every run, and the median per setting). The machine is shared: compare the settings of
one invocation, not runs of different days.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.peers.run import api, write_input

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "jvm_defaults.json"
SETTINGS = os.environ.get("BENCH_JVM_SETTINGS", "full,quick").split(",")
ROUNDS = int(os.environ.get("BENCH_JVM_ROUNDS", "2"))
RECORDS = int(os.environ.get("BENCH_JVM_RECORDS", "1500"))
ROWS = int(os.environ.get("BENCH_JVM_ROWS", "2000000"))
#: The launch as a user's: no Java options of the caller's own (a test suite's, say).
ENV = {k: v for k, v in os.environ.items() if k != "SPARK_SUBMIT_OPTS"}
ENV |= {"SPARK_MASTER": "local[2]", "PYTHONPATH": str(REPO)}
ENV |= {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def first_call(setting: str, url: str, data: Path, work: Path) -> dict[str, float]:
    """Seconds from the job's launch to its first call and to its exit."""
    command = [
        sys.executable, "-m", "spark_jobs.enrich_job", "--input", str(data),
        "--input-format", "parquet", "--output", str(work / "out"), "--key-column", "id",
        "--url-template", url + "/items/{id}", "--response-field", "name=$.name",
        "--partitions", "2", "--capacity", "8", "--snapshot-dir", str(work / "snapshots"),
        "--resume", "never",
    ]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(
        command, env={**ENV, "ENRICH_JVM_JIT": setting}, capture_output=True, text=True
    )
    ended = time.monotonic()
    if done.returncode:
        raise RuntimeError(f"the job ({setting}) exit {done.returncode}: {done.stderr[-2000:]}")
    return {
        "first_call_s": round(first_request_at(url) - started, 2),
        "wall_s": round(ended - started, 2),
    }


def first_request_at(url: str) -> float:
    import urllib.request

    with urllib.request.urlopen(url + "/stats", timeout=5) as response:
        return float(json.loads(response.read())["first"])


def jvm_work(setting: str, rows: Path, work: Path) -> dict[str, float]:
    """The JVM's own work on ``rows`` in a session opened as the job opens one."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.jvm_defaults", "--work", str(rows), str(work)],
        env={**ENV, "ENRICH_JVM_JIT": setting},
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise RuntimeError(
            f"the JVM work ({setting}) exit {done.returncode}: {done.stderr[-2000:]}"
        )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def run_work(rows: str, work: str) -> None:
    """In the child: the session, then read, count, shuffle, sort, mapInArrow, write."""
    from spark_jobs.session.spark_session import spark_session

    started = time.monotonic()
    spark = spark_session(None)
    opened = time.monotonic()
    frame = spark.read.json(rows)
    count = frame.count()
    ordered = frame.repartition(8, "id").sortWithinPartitions("id")
    ordered.mapInArrow(lambda batches: batches, frame.schema).write.parquet(work + "/out")
    ended = time.monotonic()
    spark.stop()
    assert count == ROWS, count
    print(json.dumps({"session_s": round(opened - started, 2), "work_s": round(ended - opened, 2)}))


def write_rows(folder: Path) -> Path:
    """``ROWS`` JSON lines in 20 files (generated once per invocation)."""
    folder.mkdir()
    per_file = -(-ROWS // 20)
    for part in range(20):
        lines = [
            f'{{"id": "k{i:08d}", "event_time": {1_700_000_000_000 + i}, "amount": {i}}}\n'
            for i in range(part * per_file, min(ROWS, (part + 1) * per_file))
        ]
        (folder / f"part-{part:02d}.jsonl").write_text("".join(lines))
    return folder


def summary(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    figures = ("first_call_s", "wall_s", "session_s", "work_s")
    return {
        setting: {
            name: statistics.median(run[name] for run in runs if run["setting"] == setting)
            for name in figures
        }
        for setting in SETTINGS
    }


def main() -> int:
    if sys.argv[1:2] == ["--work"]:
        run_work(sys.argv[2], sys.argv[3])
        return 0
    runs = []
    with tempfile.TemporaryDirectory() as tmp, api(20) as server:
        data, rows = write_input(Path(tmp), RECORDS), write_rows(Path(tmp) / "rows")
        for round_ in range(ROUNDS):
            for setting in SETTINGS:
                work = Path(tempfile.mkdtemp(dir=tmp))
                server.reset()
                run = {"setting": setting, "round": round_, "load_1m": round(os.getloadavg()[0], 2)}
                run |= first_call(setting, server.url, data, work / "call")
                run |= jvm_work(setting, rows, work / "jvm")
                print(json.dumps(run), flush=True)
                runs.append(run)
    result = {"records": RECORDS, "rows": ROWS, "runs": runs, "median": summary(runs)}
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["median"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
