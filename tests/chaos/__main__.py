"""``make chaos``: the job on a real standalone cluster, broken on purpose, run after run.

A master and two workers on loopback addresses (the jars pyspark ships), the demo API as
its own process (its per-key call counts are the call journal), and snapshots on a
shared directory. Every run enriches the same input from scratch while one fault hits it
at a random moment of its progress:

* ``executor``: SIGKILL of one executor JVM (Spark reschedules its tasks);
* ``python_worker``: SIGKILL of one Python worker (the task fails and is retried);
* ``worker``: SIGKILL of a whole worker with its executor and Python workers;
* ``driver``: SIGKILL of the driver with everything it started, then a resubmit;
* ``snapshot_write``: SIGKILL of the driver the moment a snapshot is written but not
  committed yet, then a resubmit;
* ``zombie``: a second submit of the same job while the first still runs;
* ``disk_full``: the snapshot store (a small tmpfs of its own) fills up mid-run, so every
  write fails with "No space left on device", and frees up a few seconds later; a run that
  gave up meanwhile is resubmitted.

Snapshots live on a shared directory or on S3 (moto's server on loopback), taking turns
(``CHAOS_STORES``); ``disk_full`` always uses its own tmpfs.

After each run the published output is checked against the input (lost, duplicated) and
the calls repeated beyond one per record against the bound: the calls each killed run
made that its snapshots had not committed at the kill. The last line is
``CHAOS runs=N lost=L duplicated=D repeated=R bound=B failures=F``. ``CHAOS_RUNS`` (or
``--runs``) sets the number of runs; faults take turns.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import pyarrow.parquet as pq
from fsspec.core import url_to_fs
from moto.server import ThreadedMotoServer

from demo.stack import DemoApiProcess, demo_api
from spark_jobs.driver.current_result import read_result
from spark_jobs.snapshots import NamespaceKey, SnapshotStore
from tests.integration.job_support import job_args, start_job, write_input
from tests.integration.spark_cluster import standalone_cluster

FAULTS = (
    "executor",
    "python_worker",
    "worker",
    "driver",
    "snapshot_write",
    "zombie",
    "disk_full",
)
STORES = ("local", "s3")
#: Resubmitted after the run ends: the driver is gone, or the store failed for too long.
RESUBMIT = ("driver", "snapshot_write", "disk_full")
ROWS = 4_000
KEY = NamespaceKey("manual", "enrich", "default")


@dataclass
class Outcome:
    fault: str
    store: str
    ok: bool = True
    lost: int = 0
    duplicated: int = 0
    repeated: int = 0
    bound: int = 0
    notes: list[str] = field(default_factory=list)


def pids_matching(text: str, within: Path) -> list[int]:
    """Processes whose command line contains ``text`` and that belong to a cluster under
    ``within``: their command line names it (a worker's ``--work-dir``) or they run in it
    (an executor and its Python workers run in the executor's work directory). Never
    another process on the machine: another test's or a benchmark's Spark."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                cwd = Path(os.readlink(entry / "cwd"))
            except OSError:
                continue
            if text in command and (str(within) in command or cwd.is_relative_to(within)):
                found.append(int(entry.name))
    return found


def committed(snapshots: str) -> int:
    try:
        return sum(p.done_rows for p in SnapshotStore(snapshots).namespace_progress(KEY))
    except FileNotFoundError:
        return 0


def uncommitted_segment(snapshots: str) -> bool:
    """A segment newer than every commit of its partition (a base cut), or a commit still
    under its temporary name (a local store): a snapshot is being written."""
    fs, root = url_to_fs(snapshots)
    for part in fs.glob(f"{root}/*/*/*/part-*"):
        if fs.glob(f"{part}/commits/*.tmp"):
            return True
        segments = [_mtime(fs, p) for p in fs.glob(f"{part}/segments/*")]
        manifests = [_mtime(fs, p) for p in fs.glob(f"{part}/commits/*.snap")]
        if segments and max(segments) > max(manifests, default=0):
            return True
    return False


def _mtime(fs, path: str) -> float:
    info = fs.info(path)
    modified = info.get("mtime", info.get("LastModified"))
    return modified.timestamp() if hasattr(modified, "timestamp") else float(modified or 0)


class SnapshotRoots:
    """Where each run keeps its snapshots: a shared directory, a bucket on a moto S3 server
    (the job's driver and executors find it through ``AWS_ENDPOINT_URL``), or a small tmpfs
    of its own that ``disk_full`` can fill."""

    def __init__(self, stack: ExitStack, tmp: Path, stores: list[str]) -> None:
        self._stack, self._tmp, self._s3 = stack, tmp, None
        if "s3" in stores:
            logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
            server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            server.start()
            stack.callback(server.stop)
            host, port = server.get_host_and_port()
            # The cluster and the jobs inherit this environment.
            os.environ.update(
                AWS_ENDPOINT_URL=f"http://{host}:{port}",
                AWS_ACCESS_KEY_ID="chaos",
                AWS_SECRET_ACCESS_KEY="chaos-secret",
                AWS_DEFAULT_REGION="us-east-1",
            )
            self._s3 = boto3.client("s3")

    def make(self, number: int, store: str) -> str:
        if store == "s3":
            assert self._s3 is not None
            self._s3.create_bucket(Bucket=f"chaos-{number}")
            return f"s3://chaos-{number}/snapshots"
        if store == "tmpfs":
            mount = self._tmp / f"run{number}" / "snapshots"
            mount.mkdir(parents=True)
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=64m,mode=0700", "tmpfs", str(mount)],
                check=True,
                capture_output=True,
            )
            self._stack.callback(subprocess.run, ["umount", "-l", str(mount)], check=False)
            return str(mount)
        return str(self._tmp / f"run{number}" / "snapshots")


def can_mount_tmpfs() -> bool:
    """``disk_full`` needs a filesystem that really fills up: a tmpfs mount (root)."""
    with tempfile.TemporaryDirectory() as probe:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", probe], capture_output=True
        )
        if mounted.returncode == 0:
            subprocess.run(["umount", probe], check=False)
        return mounted.returncode == 0


def fill(directory: str) -> Path:
    """Write one file until the filesystem has no byte left; it frees all by its removal."""
    filler = Path(directory) / "filler"
    with filler.open("wb") as handle:
        try:
            while True:
                handle.write(b"\0" * (1 << 20))
                handle.flush()
        except OSError:
            pass
    try:  # the last partial page too
        with filler.open("ab") as handle:
            while True:
                handle.write(b"\0" * 512)
                handle.flush()
    except OSError:
        pass
    return filler


class Chaos:
    def __init__(self, tmp: Path, rng: random.Random, roots: SnapshotRoots) -> None:
        self.tmp = tmp
        self.rng = rng
        self.roots = roots

    def run(self, number: int, fault: str, store: str, master: str, api: DemoApiProcess) -> Outcome:
        work = self.tmp / f"run{number}"
        write_input(work / "in" / "part.jsonl", [f"k{i:05d}" for i in range(ROWS)])
        snapshots = self.roots.make(number, "tmpfs" if fault == "disk_full" else store)
        api.post("/stats/reset")
        # Slow enough (4 partitions x 4 calls in flight x 50 ms) that faults land mid-flight.
        # A short lease: a resubmit after a driver kill takes over within seconds.
        args = job_args(work, api.url, "--partitions", "4", "--capacity", "4", "--lease-ttl", "5")
        args += ["--snapshot-dir", snapshots]
        env = {"SPARK_MASTER": master, "SPARK_LOCAL_IP": "127.0.0.1"}
        outcome = Outcome(fault, "tmpfs" if fault == "disk_full" else store)
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
        elif fault == "disk_full":
            outcome.notes.append(self._fill_for_a_while(job, snapshots, api, outcome))
            if job.wait(900) != 0:
                outcome.bound += max(0, api.settled_calls() - committed(snapshots))
                outcome.notes.append(f"the run exited {job.returncode}; resubmitted")
                job = start_job(args, env)
            outcome.ok = job.wait(900) == 0
        else:
            if fault == "snapshot_write":
                self._wait(lambda: uncommitted_segment(snapshots) or job.poll() is not None, 0.005)
            outcome.notes.append(self._strike(fault, job))
            # What the killed attempt(s) may have called without a commit, at most. Commits
            # are read first: other tasks go on committing while they are read (slowly, on
            # S3), and every row committed by then was called before the calls are counted.
            if fault in RESUBMIT:
                calls = api.settled_calls()  # the run is dead: its last requests land
                done = committed(snapshots)
            else:
                done = committed(snapshots)
                time.sleep(0.5)  # requests of the killed tasks still on the wire land
                calls = sum(api.calls_per_key().values())
            outcome.bound += max(0, calls - done)
            if fault in RESUBMIT:
                job.wait(60)
                job = start_job(args, env)
            outcome.ok = job.wait(900) == 0
        self._check(outcome, work / "out", api)
        return outcome

    def _fill_for_a_while(
        self, job: subprocess.Popen, snapshots: str, api: DemoApiProcess, outcome: Outcome
    ) -> str:
        """The store refuses every write for 1-6 s, then has room again.

        The bound: every call made from the fill until everything called by the time space
        came back is committed (an attempt that gave up in between repeats only those)."""
        at_fill = committed(snapshots)
        filler = fill(snapshots)
        held = self.rng.uniform(1, 6)
        time.sleep(held)  # the fault's own duration, not a wait for a state
        filler.unlink()
        at_free = sum(api.calls_per_key().values())
        self._wait(lambda: committed(snapshots) >= at_free or job.poll() is not None)
        outcome.bound += max(0, sum(api.calls_per_key().values()) - at_fill)
        return f"store full for {held:.1f} s"

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
        targets = pids_matching(marker, self.tmp)
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
            result = read_result(str(out))
            ids = Counter(
                row["id"]
                for path in (result.data, result.dead_letters)
                for row in pq.read_table(path).to_pylist()
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
    parser.add_argument(
        "--stores",
        default=os.environ.get("CHAOS_STORES", ",".join(STORES)),
        help="where snapshots live, taking turns independently of the faults (default: local,s3)",
    )
    options = parser.parse_args(argv)
    faults, stores = options.faults.split(","), options.stores.split(",")
    unknown = set(faults) - set(FAULTS) | set(stores) - set(STORES)
    if unknown:
        parser.error(f"unknown faults or stores: {', '.join(sorted(unknown))}")
    if "disk_full" in faults and not can_mount_tmpfs():
        print("chaos: disk_full skipped: it needs to mount a small tmpfs (run as root)")
        faults.remove("disk_full")
    rng = random.Random(options.seed)
    print(f"chaos: {options.runs} runs, seed {options.seed}", flush=True)
    outcomes: list[Outcome] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        ExitStack() as stack,
        demo_api("--latency-ms", "50") as api,
    ):
        chaos = Chaos(Path(tmp), rng, SnapshotRoots(stack, Path(tmp), stores))
        for number in range(options.runs):
            fault, store = faults[number % len(faults)], stores[number % len(stores)]
            # A fresh cluster per run: a killed worker must not weaken the next run.
            cluster = Path(tmp) / f"cluster{number}"
            cluster.mkdir()
            with standalone_cluster(cluster, workers=2, cores=2) as master:
                outcome = chaos.run(number, fault, store, master, api)
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
