"""``make bench-resume``: what a kill at 50 % costs, this job's snapshots against Ray Data's
checkpointing.

For each engine, on the same input and API (``server.py``): one unbroken run; then a
run killed (SIGKILL of its whole process tree) once the server has answered half the
records, and the same command again, which resumes. Reported per engine: API calls
(unbroken, and killed + resumed), calls repeated (beyond one per record), wall time of
both, and for the job the bound of the issue (calls in flight at the kill plus one
snapshot interval of calls at the measured rate).

- ``job``: ``python -m spark_jobs.enrich_job`` with ``--snapshot-interval`` (default 2 s)
  and ``--lease-ttl 5``, so the resumed run takes over the killed run's namespace within
  5 s (the default 60 s lease would add up to a minute of waiting to the resume);
- ``ray_data``: ``ray_peer.py --checkpoint-dir`` (``DataContext.checkpoint_config``, keyed
  on ``id``): the rerun skips rows whose output blocks were written (blocks of 10 000
  rows, as in ``make bench-peers``).

Sizes: ``BENCH_RESUME_RECORDS`` (default 40 000), ``BENCH_RESUME_DELAY_MS`` (20),
``BENCH_RESUME_CAPACITY`` (64), ``BENCH_RESUME_INTERVAL`` (2). Results go to
``benchmarks/results/resume.json``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.peers.measure import TreeSampler
from benchmarks.peers.run import (
    PARTITIONS,
    REPO,
    Api,
    api,
    command,
    ray_missing,
    setting,
    write_input,
)

RESULTS = REPO / "benchmarks" / "results" / "resume.json"


def engine_command(engine: str, url: str, capacity: int, data: Path, work: Path) -> list[str]:
    records = int(setting("BENCH_RESUME_RECORDS", "40000"))
    if engine == "job":
        base = command("job_10s", url, capacity, data, work, records)
        base = base[: base.index("--snapshot-interval")]  # and "--resume never": auto
        interval = setting("BENCH_RESUME_INTERVAL", "2")
        return [*base, "--snapshot-interval", interval, "--lease-ttl", "5"]
    base = command("ray_data", url, capacity, data, work, records)
    return [*base, "--checkpoint-dir", str(work / "checkpoints")]


def attempt(cmd: list[str], server: Api, kill_at: int | None) -> tuple[float, bool, int]:
    """Run ``cmd`` until it ends, or SIGKILL its whole tree once the server answered
    ``kill_at`` requests. Returns (wall seconds, killed, requests answered at the kill)."""
    env = {**os.environ, "SPARK_MASTER": f"local[{PARTITIONS}]", "PYTHONPATH": str(REPO)}
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    started = time.monotonic()
    process = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    sampler = TreeSampler(process.pid, period=0.05).start()
    try:
        while process.poll() is None:
            if kill_at is not None and server.stats()["requests"] >= kill_at:
                answered = server.stats()["requests"]
                sampler.stop()
                for pid in [process.pid, *sampler.procs]:  # Ray's daemons leave the group
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                process.wait()
                return time.monotonic() - started, True, answered
            time.sleep(0.05)
    finally:
        sampler.stop()
    if process.returncode:
        raise RuntimeError(f"{cmd[2]} exited with {process.returncode}")
    return time.monotonic() - started, False, 0


def settled(server: Api) -> int:
    """Requests answered once those of a killed client still in the server are counted."""
    last = -1
    while (now := server.stats()["requests"]) != last:
        last = now
        time.sleep(0.5)
    return now


def measure(engine: str, server: Api, data: Path, tmp: Path, records: int) -> dict[str, Any]:
    capacity = int(setting("BENCH_RESUME_CAPACITY", "64"))
    server.reset()
    (tmp / f"{engine}-unbroken").mkdir()
    unbroken_cmd = engine_command(engine, server.url, capacity, data, tmp / f"{engine}-unbroken")
    unbroken_wall, _, _ = attempt(unbroken_cmd, server, None)
    unbroken_calls = settled(server)
    rate = unbroken_calls / (server.stats()["last"] - server.stats()["first"])
    server.reset()
    work = tmp / f"{engine}-killed"
    work.mkdir()
    cmd = engine_command(engine, server.url, capacity, data, work)
    killed_wall, killed, at_kill = attempt(cmd, server, records // 2)
    first_calls = settled(server)
    resumed_wall, _, _ = attempt(cmd, server, None)
    total = settled(server)
    result = {
        "engine": engine,
        "records": records,
        "capacity": capacity,
        "delay_ms": float(setting("BENCH_RESUME_DELAY_MS", "20")),
        "unbroken_calls": unbroken_calls,
        "unbroken_wall_s": round(unbroken_wall, 2),
        "killed": killed,
        "calls_before_kill": first_calls,
        "calls_answered_at_kill": at_kill,
        "calls_total": total,
        "calls_repeated": total - records,
        "wall_killed_s": round(killed_wall, 2),
        "wall_resumed_s": round(resumed_wall, 2),
        "wall_total_s": round(killed_wall + resumed_wall, 2),
        "wall_ratio_to_unbroken": round((killed_wall + resumed_wall) / unbroken_wall, 2),
        "rate_per_s": round(rate, 1),
    }
    if engine == "job":
        interval = float(setting("BENCH_RESUME_INTERVAL", "2"))
        in_flight = capacity * PARTITIONS
        result["snapshot_interval_s"] = interval
        result["bound_in_flight_plus_interval"] = round(in_flight + rate * interval)
    return result


def main() -> int:
    records = int(setting("BENCH_RESUME_RECORDS", "40000"))
    engines = ["job", "ray_data"]
    if reason := ray_missing():
        print(f"ray_data: skipped: {reason}", flush=True)
        engines.remove("ray_data")
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-resume-") as tmp:
        data = write_input(Path(tmp), records)
        with api(float(setting("BENCH_RESUME_DELAY_MS", "20"))) as server:
            for engine in engines:
                results.append(measure(engine, server, data, Path(tmp), records))
                print(json.dumps(results[-1]), flush=True)
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    print(
        "| engine | records | calls unbroken | calls killed + resumed | repeated | "
        "bound | wall unbroken s | wall killed + resumed s | ratio |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['engine']} | {r['records']} | {r['unbroken_calls']} | {r['calls_total']} "
            f"| {r['calls_repeated']} | {r.get('bound_in_flight_plus_interval', '—')} "
            f"| {r['unbroken_wall_s']} | {r['wall_killed_s']} + {r['wall_resumed_s']} "
            f"| {r['wall_ratio_to_unbroken']} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
