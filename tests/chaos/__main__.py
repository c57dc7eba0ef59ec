"""``make chaos``: the job on a real standalone cluster, broken on purpose, run after run.

A master and two workers on loopback addresses (the jars pyspark ships), the demo API as
its own process (its per-key call counts are the call journal), and snapshots on a
shared directory. Every run enriches the same input from scratch while one fault hits it
at a random moment of its progress:

* ``executor``: SIGKILL of one executor JVM (Spark reschedules its tasks);
* ``python_worker``: SIGKILL of one Python worker (the task fails and is retried);
* ``worker``: SIGKILL of a whole worker with its executor and Python workers;
* ``driver``: SIGKILL of the driver with everything it started, then a resubmit;
* ``snapshot_write``: SIGKILL of the driver the moment a segment is written whose
  manifest is not committed yet, then a resubmit;
* ``zombie``: a second submit of the same job while the first still runs.

After each run the published output is checked against the input (lost, duplicated) and
the calls repeated beyond one per record against the bound: the calls each killed run
made that its snapshots had not committed at the kill. The last line is
``CHAOS runs=N lost=L duplicated=D repeated=R bound=B failures=F``. ``CHAOS_RUNS`` (or
``--runs``) sets the number of runs; faults take turns.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from demo.stack import DemoApiProcess, demo_api
from spark_jobs.snapshots import NamespaceKey, SnapshotStore
from tests.integration.job_support import job_args, start_job, write_input
from tests.integration.spark_cluster import standalone_cluster

FAULTS = ("executor", "python_worker", "worker", "driver", "snapshot_write", "zombie")
ROWS = 4_000
KEY = NamespaceKey("manual", "enrich", "default")


@dataclass
class Outcome:
    fault: str
    ok: bool = True
    lost: int = 0
    duplicated: int = 0
    repeated: int = 0
    bound: int = 0
    notes: list[str] = field(default_factory=list)


def pids_matching(text: str) -> list[int]:
    """Processes whose command line contains ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def committed(snapshots: Path) -> int:
    try:
        return sum(p.done_rows for p in SnapshotStore(str(snapshots)).namespace_progress(KEY))
    except FileNotFoundError:
        return 0


def uncommitted_segment(snapshots: Path) -> bool:
    """A segment newer than every manifest of its partition: a snapshot is being written."""
    for part in snapshots.rglob("part-*"):
        segments = [p.stat().st_mtime for p in (part / "segments").glob("*")]
        manifests = [p.stat().st_mtime for p in (part / "manifests").glob("*.json")]
        if segments and max(segments) > max(manifests, default=0):
            return True
    return False


class Chaos:
    def __init__(self, tmp: Path, rng: random.Random) -> None:
        self.tmp = tmp
        self.rng = rng

    def run(self, number: int, fault: str, master: str, api: DemoApiProcess) -> Outcome:
        work = self.tmp / f"run{number}"
        write_input(work / "in" / "part.jsonl", [f"k{i:05d}" for i in range(ROWS)])
        api.post("/stats/reset")
        # Slow enough (4 partitions x 4 calls in flight x 50 ms) that faults land mid-flight.
        # A short lease: a resubmit after a driver kill takes over within seconds.
        args = job_args(work, api.url, "--partitions", "4", "--capacity", "4", "--lease-ttl", "5")
        env = {"SPARK_MASTER": master, "SPARK_LOCAL_IP": "127.0.0.1"}
        outcome = Outcome(fault)
        job = start_job(args, env)
        moment = self.rng.uniform(0.15, 0.7)
        self._wait(
            lambda: sum(api.calls_per_key().values()) >= moment * ROWS or job.poll() is not None
        )
        if fault == "zombie":
            second = start_job(args, env)
            codes = [job.wait(600), second.wait(600)]
            outcome.ok = codes == [0, 0]
            outcome.notes.append(f"exit codes {codes}")
        else:
            if fault == "snapshot_write":
                self._wait(
                    lambda: uncommitted_segment(work / "snapshots") or job.poll() is not None, 0.005
                )
            outcome.notes.append(self._strike(fault, job))
            if fault in ("driver", "snapshot_write"):
                calls = api.settled_calls()  # the run is dead: its last requests land
            else:
                time.sleep(0.5)  # requests of the killed tasks still on the wire land
                calls = sum(api.calls_per_key().values())
            # What the killed attempt(s) may have called without a commit, at most.
            outcome.bound += max(0, calls - committed(work / "snapshots"))
            if fault in ("driver", "snapshot_write"):
                job.wait(60)
                job = start_job(args, env)
            outcome.ok = job.wait(900) == 0
        self._check(outcome, work / "out", api)
        return outcome

    def _strike(self, fault: str, job: subprocess.Popen) -> str:
        """Kill what ``fault`` names; says what was killed."""
        if fault in ("driver", "snapshot_write"):
            os.killpg(job.pid, signal.SIGKILL)
            return f"killed the driver (pid {job.pid}) and its process group"
        marker = {
            "executor": "CoarseGrainedExecutorBackend",
            "python_worker": "pyspark.daemon",
            "worker": "deploy.worker.Worker",
        }[fault]
        targets = pids_matching(marker)
        if not targets:
            return f"no {marker} process to kill (the run had finished)"
        target = self.rng.choice(targets)
        if fault == "worker":  # the worker with its executor and Python workers
            os.killpg(os.getpgid(target), signal.SIGKILL)
        else:
            os.kill(target, signal.SIGKILL)
        return f"killed {marker} pid {target} of {len(targets)}"

    def _check(self, outcome: Outcome, out: Path, api: DemoApiProcess) -> None:
        expected = Counter(f"k{i:05d}" for i in range(ROWS))
        try:
            ids = Counter(
                row["id"]
                for kind in ("data", "dead_letters")
                for row in pq.read_table(out / kind).to_pylist()
            )
        except (OSError, FileNotFoundError):
            ids = Counter()
        outcome.lost = sum((expected - ids).values())
        outcome.duplicated = sum((ids - expected).values())
        outcome.repeated = sum(api.calls_per_key().values()) - ROWS
        if outcome.lost or outcome.duplicated or outcome.repeated > outcome.bound:
            outcome.ok = False

    @staticmethod
    def _wait(check, interval: float = 0.2, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise TimeoutError("chaos: the state never came")
            time.sleep(interval)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make chaos")
    parser.add_argument("--runs", type=int, default=int(os.environ.get("CHAOS_RUNS", len(FAULTS))))
    parser.add_argument("--seed", type=int, default=int(os.environ.get("CHAOS_SEED", time.time())))
    parser.add_argument(
        "--faults",
        default=os.environ.get("CHAOS_FAULTS", ",".join(FAULTS)),
        help=f"comma-separated, taking turns (default: all of {', '.join(FAULTS)})",
    )
    options = parser.parse_args(argv)
    faults = options.faults.split(",")
    unknown = set(faults) - set(FAULTS)
    if unknown:
        parser.error(f"unknown faults: {', '.join(sorted(unknown))}")
    rng = random.Random(options.seed)
    print(f"chaos: {options.runs} runs, seed {options.seed}", flush=True)
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory() as tmp, demo_api("--latency-ms", "50") as api:
        chaos = Chaos(Path(tmp), rng)
        for number in range(options.runs):
            fault = faults[number % len(faults)]
            # A fresh cluster per run: a killed worker must not weaken the next run.
            cluster = Path(tmp) / f"cluster{number}"
            cluster.mkdir()
            with standalone_cluster(cluster, workers=2, cores=2) as master:
                outcome = chaos.run(number, fault, master, api)
            outcomes.append(outcome)
            print(f"chaos: run {number} {json.dumps(outcome.__dict__)}", flush=True)
    failures = sum(not o.ok for o in outcomes)
    print(
        f"CHAOS runs={len(outcomes)} lost={sum(o.lost for o in outcomes)} "
        f"duplicated={sum(o.duplicated for o in outcomes)} "
        f"repeated={sum(o.repeated for o in outcomes)} bound={sum(o.bound for o in outcomes)} "
        f"failures={failures}"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
