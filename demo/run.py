"""``make demo``: the daily DAG end to end on one machine, with a crash, a resume, and a
second day that pays only for new customers.

Generates two days of customer events (most customers come back on day 2), starts the
demo API on loopback and a real Airflow (api-server, scheduler, dag-processor; SQLite;
Spark ``local[*]``), triggers day 1, breaks the API once snapshots are committed so the
first try fails, heals it, and lets Airflow's automatic retry resume from the snapshots.
Then day 2 runs with the response cache day 1 filled, published into a Delta table (the
DAG's ``output_format`` param) that Polars, a second engine, reads back. Shows progress
while it runs and a summary of both days at the end; stops everything it started.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import time
from collections import deque
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from demo.generate import generate_rows, write
from demo.stack import ROOT, airflow_env, airflow_services, demo_api, init_airflow
from spark_jobs.driver.current_result import read_result
from spark_jobs.records.values import format_count
from spark_jobs.snapshots import NamespaceInfo, NamespaceKey, PartitionProgress, SnapshotStore
from spark_jobs.snapshots.resume import read_progress

DAG = "enrich_customers"
DAY = "2024-01-01"
DAY_2 = "2024-01-02"
COST_PER_REQUEST = 0.002  # what the demo pretends one API call costs, in dollars
OUTAGE = {"outage_after_requests": 0, "outage_requests": 10**9}


class Demo:
    def __init__(self, workdir: Path, rows: int) -> None:
        self.workdir, self.rows = workdir, rows
        self.data, self.snapshots = workdir / "data", workdir / "snapshots"
        self.key = NamespaceKey(DAG, "enrich", f"{DAY}T00:00:00+00:00")
        self.started = time.monotonic()
        self._samples: deque[tuple[float, int]] = deque(maxlen=20)  # ~10 s of polls
        self.done = 0
        self._width = 0  # of the longest progress line so far

    def prepare(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)
        rows = generate_rows(self.rows, seed=7, duplicate_rate=0.05, bad_rows=3, date=DAY)
        write(rows, self.data / "input" / DAY / "events.jsonl", "jsonl")
        say(f"generated {self.rows} events for {DAY} (5% repeated ids, 3 bad rows)")
        # Customer ids are numbered in order of first appearance: a tenth more events on
        # day 2 brings back day 1's customers and adds about a tenth of new ones.
        more = self.rows + self.rows // 10
        rows = generate_rows(more, seed=8, duplicate_rate=0.05, date=DAY_2)
        write(rows, self.data / "input" / DAY_2 / "events.jsonl", "jsonl")
        say(f"generated {more} events for {DAY_2}: mostly the same customers")

    def progress(self, try_number: int, waiting: str | None = None) -> int:
        """One progress line, from the snapshots the Spark tasks commit (the namespace is
        deleted after success, so the last figures stay on screen). ``waiting`` replaces
        the rate and in-flight count while no try runs: those would be the failed try's."""
        try:
            progress = read_progress(SnapshotStore(str(self.snapshots)), self.key)
        except FileNotFoundError:
            return self.done
        # max: while the job replaces its snapshots by the completion record, a reading
        # sees only some partitions.
        self.done = max(self.done, progress.done)
        width = 30
        filled = int(width * min(self.done / self.rows, 1))
        bar = "#" * filled + "." * (width - filled)
        if waiting is not None:
            self._samples.clear()  # the next try's rate starts from its own first sample
            status = waiting
        elif not progress.partitions and self.done:
            status = f"try {try_number} done: output written, snapshots cleared"
        elif not (ours := _committed_by(progress, try_number)):
            safe = format_count(self.done)
            status = f"try {try_number} started: no new snapshot yet ({safe} records safe)"
        else:
            in_flight = sum(p.in_flight for p in ours if not p.partition_stats.finished)
            status = f"{self._rate():>6.0f} rec/s  {in_flight:>4} in flight  try {try_number}"
        # Pad to wipe the rest of a longer line written before.
        line = f"  [{bar}] {self.done:>6}/{self.rows} records  {status}"
        print(f"\r{line:<{self._width}}", end="", flush=True)
        self._width = max(self._width, len(line))
        return self.done

    def _rate(self) -> float:
        """Records per second over the last ~10 s of samples of the running try."""
        now = time.monotonic()
        self._samples.append((now, self.done))
        then, done_then = self._samples[0]
        return max((self.done - done_then) / (now - then), 0.0) if now > then else 0.0

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
                AIRFLOW_VAR_ENRICHMENT_CACHE_ROOT=str(self.workdir / "cache"),
                AIRFLOW_VAR_ENRICHMENT_CACHE_TTL="7d",
                AIRFLOW_VAR_ENRICHMENT_COST_PER_REQUEST=str(COST_PER_REQUEST),
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
                summary = _summary(af, run_id)
                summary["api_calls"] = api.get("/stats")["total"]
                summary["day_2"] = self._second_day(api, af, summary["api_calls"])
        summary["rows_out"] = _rows_written(summary["output"])
        return summary

    def _second_day(self, api, af, calls_before: int) -> dict[str, Any]:
        run_id = af.request(
            "POST",
            f"/api/v2/dags/{DAG}/dagRuns",
            {
                "logical_date": f"{DAY_2}T00:00:00Z",
                "conf": {"capacity": 20, "output_format": "delta"},
            },
        )["dag_run_id"]
        say(f"triggered {DAY_2} into a Delta table: day 1's answers are in the response cache")
        while af.dag_run(DAG, run_id)["state"] not in ("success", "failed"):
            time.sleep(0.5)
        if af.dag_run(DAG, run_id)["state"] != "success":
            raise SystemExit(f"make demo: day 2 failed; logs under {self.workdir / 'airflow'}")
        summary = _summary(af, run_id)
        summary["api_calls"] = api.get("/stats")["total"] - calls_before
        summary["rows_out"] = _rows_in_tables(summary)
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
        retry_at = _retry_time(af, run_id)
        while af.dag_run(DAG, run_id)["state"] not in ("success", "failed"):
            ti = af.task_instance(DAG, run_id, "enrich")
            if ti["try_number"] > 1 and ti["state"] in ("running", "success"):
                self.progress(ti["try_number"])
            else:
                self.progress(1, self._waiting_line(ti, retry_at))
            time.sleep(0.5)
        print()
        if af.dag_run(DAG, run_id)["state"] != "success":
            raise SystemExit(f"make demo: the run failed; logs under {self.workdir / 'airflow'}")

    def _waiting_line(self, ti: dict[str, Any], retry_at: datetime) -> str:
        """What happens between the failed try and the running retry."""
        safe = format_count(self.done)
        if ti["state"] == "up_for_retry":
            seconds = (retry_at - datetime.now(UTC)).total_seconds()
            when = f"in {seconds:.0f} s" if seconds >= 1 else "now (the scheduler picks it up)"
            step = f"Airflow retries {when}"
        else:
            step = f"try {ti['try_number']} {ti['state'] or 'scheduled'}, starting Spark"
        return f"try 1 failed (API outage); {step}; {safe} records are safe in snapshots"

    def _check_alive(self, af, run_id: str) -> None:
        run_state = af.dag_run(DAG, run_id)["state"]
        if run_state in ("failed", "success"):
            raise SystemExit(f"make demo: the run ended early ({run_state}); see {self.workdir}")
        if time.monotonic() - self.started > 600:
            raise SystemExit(
                "make demo: no progress in 10 minutes; see the logs under " + str(self.workdir)
            )


def _committed_by(progress: NamespaceInfo, try_number: int) -> list[PartitionProgress]:
    """The partitions whose latest commit is this try's (the operator puts the try in the
    job's run id): other figures, such as the in-flight count, are an earlier try's."""
    return [p for p in progress.partitions if f".try{try_number}." in p.partition_stats.run_id]


def _retry_time(af, run_id: str) -> datetime:
    """When Airflow retries the failed try: its end plus the task's ``retry_delay``."""
    ti = af.task_instance(DAG, run_id, "enrich")
    delay = af.request("GET", f"/api/v2/dags/{DAG}/tasks/enrich")["retry_delay"] or {}
    seconds = delay.get("days", 0) * 86_400 + delay.get("seconds", 0)
    return datetime.fromisoformat(ti["end_date"]) + timedelta(seconds=seconds)


def _summary(af, run_id: str) -> dict[str, Any]:
    """The enrich task's return value (the job summary) from XCom."""
    value = af.request(
        "GET",
        f"/api/v2/dags/{DAG}/dagRuns/{run_id}/taskInstances/enrich/xcomEntries/return_value",
    )["value"]
    return json.loads(value) if isinstance(value, str) else value


def _rows_written(output: str) -> int:
    result = read_result(output)
    return sum(
        pq.read_metadata(f).num_rows
        for folder in (result.data, result.dead_letters)
        for f in Path(folder).glob("*.parquet")
    )


def _rows_in_tables(summary: dict[str, Any]) -> int:
    """The run's rows as Polars reads them from the Delta tables it committed (the
    data table and its dead-letter table, at the versions the summary names): an engine
    that knows nothing of this job."""
    import polars as pl

    table = summary["table"]
    day = pl.col("interval_start") == f"{DAY_2}T00:00:00+00:00"
    return sum(
        pl.read_delta(version["uri"], version=version["version"]).filter(day).height
        for version in (table["data"], table["dead_letters"])
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
        ("output", summary["output"]),
    ]
    day_2 = summary["day_2"]
    cost = day_2["cost"]
    rows += [
        (f"day 2 ({DAY_2}) records", day_2["records_in"]),
        ("day 2 Delta table (read by Polars)", day_2["table"]["data"]["uri"]),
        ("day 2 exactly once", "yes" if day_2["rows_out"] == day_2["records_in"] else "NO"),
        (
            "day 2 API calls",
            f"{day_2['api_calls']} ({day_2['api_calls'] / day_2['records_in']:.0%} of its records)",
        ),
        ("day 2 answered by the response cache", cost["response_cache_hits"]),
        ("day 2 estimated cost", f"${cost['estimated_cost']:.2f} at ${COST_PER_REQUEST}/call"),
        ("day 2 estimated saving", f"${cost['estimated_saving']:.2f}"),
        ("demo wall time", f"{seconds:.0f} s"),
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
    # The progress line reads manifests while the job replaces them by its completion
    # record: the store's warnings about the vanishing files would only interrupt it.
    logging.getLogger("spark_jobs.snapshots").setLevel(logging.ERROR)
    started = time.monotonic()
    summary = Demo(Path(args.workdir), args.rows).run()
    print_summary(summary, time.monotonic() - started)
    day_2 = summary["day_2"]
    exactly_once = summary["records_in"] == summary["rows_out"]
    exactly_once = exactly_once and day_2["records_in"] == day_2["rows_out"]
    cached = day_2["api_calls"] < day_2["records_in"] / 2
    return 0 if exactly_once and summary["resumed"] and cached else 1


if __name__ == "__main__":
    sys.exit(main())
