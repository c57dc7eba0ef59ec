"""``make demo``: the daily DAG end to end on one machine, with a crash and a resume.

Generates a day of customer events, starts the demo API on loopback and a real Airflow
(api-server, scheduler, dag-processor; SQLite; Spark ``local[*]``), triggers the day's
run, breaks the API once snapshots are committed so the first try fails, heals it, and
lets Airflow's automatic retry resume from the snapshots. Shows progress while it runs
and a summary at the end; stops everything it started.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from demo.generate import generate_rows, write
from demo.stack import ROOT, airflow_env, airflow_services, demo_api, init_airflow
from spark_jobs.snapshots import NamespaceKey, SnapshotStore
from spark_jobs.snapshots.resume import read_progress

DAG = "enrich_customers"
DAY = "2024-01-01"
OUTAGE = {"outage_after_requests": 0, "outage_requests": 10**9}


class Demo:
    def __init__(self, workdir: Path, rows: int) -> None:
        self.workdir, self.rows = workdir, rows
        self.data, self.snapshots = workdir / "data", workdir / "snapshots"
        self.key = NamespaceKey(DAG, "enrich", f"{DAY}T00:00:00+00:00")
        self.started = time.monotonic()
        self._samples: deque[tuple[float, int]] = deque(maxlen=20)  # ~10 s of polls
        self.done = 0

    def prepare(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)
        rows = generate_rows(self.rows, seed=7, duplicate_rate=0.05, bad_rows=3, date=DAY)
        write(rows, self.data / "input" / DAY / "events.jsonl", "jsonl")
        say(f"generated {self.rows} events for {DAY} (5% repeated ids, 3 bad rows)")

    def progress(self, try_number: int) -> int:
        """One progress line, from the snapshots the Spark tasks commit (the namespace is
        deleted after success, so the last figures stay on screen)."""
        try:
            progress = read_progress(SnapshotStore(str(self.snapshots)), self.key)
        except FileNotFoundError:
            return self.done
        if progress.partitions:
            self.done = progress.done
        now = time.monotonic()
        self._samples.append((now, self.done))
        then, done_then = self._samples[0]
        rate = (self.done - done_then) / (now - then) if now > then else 0.0
        width = 30
        filled = int(width * min(self.done / self.rows, 1))
        bar = "#" * filled + "." * (width - filled)
        print(
            f"\r  [{bar}] {self.done:>6}/{self.rows} records  {max(rate, 0):>6.0f} rec/s  "
            f"{progress.in_flight:>4} in flight  try {try_number}",
            end="",
            flush=True,
        )
        return self.done

    def run(self) -> dict[str, Any]:
        self.prepare()
        with demo_api("--latency-ms", "20") as api:
            say(f"demo API on {api.url}")
            env = airflow_env(
                self.workdir / "airflow",
                api.url,
                self.data,
                self.snapshots,
                spark_master="local[*]",
            )
            init_airflow(env)
            say("starting Airflow (api-server, scheduler, dag-processor) ...")
            with airflow_services(env, self.workdir / "airflow") as af:
                af.wait_for(lambda: af.request("GET", f"/api/v2/dags/{DAG}"), 180, "the DAG")
                af.request("PATCH", f"/api/v2/dags/{DAG}", {"is_paused": False})
                run_id = af.request(
                    "POST",
                    f"/api/v2/dags/{DAG}/dagRuns",
                    {
                        "logical_date": f"{DAY}T00:00:00Z",
                        "conf": {"capacity": 20, "snapshot_interval": 1},
                    },
                )["dag_run_id"]
                say(f"triggered {DAG} for {DAY} ({run_id}); Airflow UI: {af.url}")
                self._crash_and_resume(api, af, run_id)
                summary = af.request(
                    "GET",
                    f"/api/v2/dags/{DAG}/dagRuns/{run_id}/taskInstances/enrich/xcomEntries/return_value",
                )["value"]
                summary = json.loads(summary) if isinstance(summary, str) else summary
                summary["api_calls"] = api.get("/stats")["total"]
        summary["rows_out"] = sum(
            pq.read_metadata(f).num_rows
            for kind in ("data", "dead_letters")
            for f in (Path(summary["output"]) / kind).glob("*.parquet")
        )
        return summary

    def _crash_and_resume(self, api, af, run_id: str) -> None:
        def state() -> str | None:
            return af.task_instance(DAG, run_id, "enrich")["state"]

        outage_at = self.rows // 3
        while self.progress(1) < outage_at:
            self._check_alive(af, run_id)
            time.sleep(0.5)
        api.post("/faults", OUTAGE)
        print()
        say(f"API outage injected after {outage_at}+ records committed: the first try will fail")
        while state() not in ("up_for_retry", "failed"):
            self.progress(1)
            time.sleep(0.5)
        api.heal()
        print()
        say("first try failed during the outage (as planned); API healed; waiting for the retry")
        while af.dag_run(DAG, run_id)["state"] not in ("success", "failed"):
            self.progress(2)
            time.sleep(0.5)
        print()
        if af.dag_run(DAG, run_id)["state"] != "success":
            raise SystemExit(f"make demo: the run failed; logs under {self.workdir / 'airflow'}")

    def _check_alive(self, af, run_id: str) -> None:
        run_state = af.dag_run(DAG, run_id)["state"]
        if run_state in ("failed", "success"):
            raise SystemExit(f"make demo: the run ended early ({run_state}); see {self.workdir}")
        if time.monotonic() - self.started > 600:
            raise SystemExit(
                "make demo: no progress in 10 minutes; see the logs under " + str(self.workdir)
            )


def say(message: str) -> None:
    print(f"demo: {message}", flush=True)


def print_summary(summary: dict[str, Any], seconds: float) -> None:
    rows = [
        ("records", summary["records_in"]),
        ("enriched", summary["enriched"]),
        ("dead letters", summary["dead_letters"]),
        ("rows written (data + dead letters)", summary["rows_out"]),
        ("exactly once", "yes" if summary["rows_out"] == summary["records_in"] else "NO"),
        ("API calls (all tries)", summary["api_calls"]),
        ("calls saved by resume", summary["replayed_from_snapshot"]),
        ("resumed", summary["resumed"]),
        (
            "throughput of the last try",
            f"{summary['records_in'] / max(summary['duration_s'], 1e-6):.0f} records/s",
        ),
        ("demo wall time", f"{seconds:.0f} s"),
        ("output", summary["output"]),
    ]
    width = max(len(name) for name, _ in rows)
    print("\n" + "-" * (width + 40))
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    print("-" * (width + 40))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make demo", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=30_000, help="events to enrich (default 30000)")
    parser.add_argument(
        "--workdir", default=str(ROOT / "var" / "demo"), help="where everything goes"
    )
    args = parser.parse_args(argv)
    if not shutil.which("java"):
        print("make demo: Java 17 not found: install openjdk-17-jre-headless", file=sys.stderr)
        return 2
    started = time.monotonic()
    summary = Demo(Path(args.workdir), args.rows).run()
    print_summary(summary, time.monotonic() - started)
    exactly_once = summary["records_in"] == summary["rows_out"]
    return 0 if exactly_once and summary["resumed"] else 1


if __name__ == "__main__":
    sys.exit(main())
