"""Reliability under a flaky API: per fault class, what it costs and what it loses.

Run with ``make bench-reliability`` (``python -m benchmarks.reliability``). For each fault
class the demo API (its own process, 20 ms latency) hits a share of the records on their
first call only, then answers; the permanent classes hit every call. The real Spark job
(``local[*]``, 4 partitions, capacity 64, default ``--timeout`` and retries) enriches
5 000 records against it, and the same job without faults gives the baseline. Reported
per class: records, retries (requests beyond one per record), dead letters, and the
wall-time ratio to the fault-free run measured in the same invocation. The last rows run
the issue's full mix in both modes. Results go to ``benchmarks/results/reliability.json``
and a Markdown table is printed for the README.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from demo.stack import DemoApiProcess

RESULTS = Path(__file__).parent / "results" / "reliability.json"
REPO_ROOT = Path(__file__).resolve().parents[1]

CLASSES: dict[str, dict[str, float]] = {
    "none (baseline)": {},
    "connection reset": {"reset_rate": 0.10},
    "HTTP 500": {"error_rate": 0.05},
    "HTTP 429, Retry-After 1": {"rate_429": 0.02},
    "empty reply": {"drop_rate": 0.01},
    "malformed chunk, left open": {"bad_chunk_rate": 0.01},
    "headers then silence": {"stall_rate": 0.01},
    "truncated body": {"truncated_rate": 0.01},
    "always 400 / cut-off JSON": {"bad_request_rate": 0.002, "cut_json_rate": 0.002},
}
MIX = {
    "reset_rate": 0.10,
    "error_rate": 0.05,
    "rate_429": 0.02,
    "drop_rate": 0.01,
    "bad_chunk_rate": 0.01,
    "bad_request_rate": 0.002,
    "cut_json_rate": 0.002,
}


def run_job(work: Path, faults: dict[str, float], mode: str, rows: int) -> dict[str, Any]:
    """One job run against a fresh demo API; the summary plus the wall time."""
    (work / "in").mkdir(parents=True)
    lines = (json.dumps({"id": f"k{i:05d}", "amount": i}) for i in range(rows))
    (work / "in" / "part.jsonl").write_text("\n".join(lines) + "\n")
    knobs = [f"--{k.replace('_', '-')}={v}" for k, v in faults.items()]
    api = DemoApiProcess("--latency-ms", "20", "--fault-attempts", "1", "--seed", "11", *knobs)
    try:
        args = [
            *("--input", str(work / "in"), "--output", str(work / "out")),
            *("--key-column", "id", "--snapshot-dir", str(work / "snapshots")),
            *("--url-template", api.url + "/customers/{id}", "--response-field", "name=$.name"),
            *("--partitions", "4", "--capacity", "64", "--mode", mode),
        ]
        started = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "spark_jobs.enrich_job", *args],
            cwd=REPO_ROOT,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wall = time.monotonic() - started
    finally:
        api.stop()
    summary = json.loads((work / "out" / "_SUMMARY.json").read_text())
    return {
        "records": summary["records_in"],
        "retries": summary["requests_made"] - summary["records_in"],
        "dead_letters": summary["dead_letters"],
        "wall_s": round(wall, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.reliability")
    parser.add_argument("--rows", type=int, default=5_000)
    rows = parser.parse_args(argv).rows
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        runs = [(name, faults, "unordered") for name, faults in CLASSES.items()]
        runs += [("full mix", MIX, "unordered"), ("none (baseline)", {}, "ordered")]
        runs += [("full mix", MIX, "ordered")]
        for index, (name, faults, mode) in enumerate(runs):
            result = run_job(Path(tmp) / str(index), faults, mode, rows)
            results.append({"fault": name, "mode": mode, **result})
            print(f"{name} ({mode}): {result}", file=sys.stderr)
    baseline = {r["mode"]: r["wall_s"] for r in results if r["fault"] == "none (baseline)"}
    print("| fault (share of records) | mode | records | retries | dead letters | wall ratio |")
    print("|---|---|---|---|---|---|")
    for r in results:
        r["wall_ratio"] = round(r["wall_s"] / baseline[r["mode"]], 2)
        share = CLASSES.get(r["fault"], MIX)
        shares = ", ".join(f"{v:g}" for v in share.values()) if share else "—"
        print(
            f"| {r['fault']} ({shares}) | {r['mode']} | {r['records']} | {r['retries']} "
            f"| {r['dead_letters']} | {r['wall_ratio']} |"
        )
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
