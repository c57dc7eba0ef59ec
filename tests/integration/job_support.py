"""Helpers for tests that run the real Spark job against a real HTTP API on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from spark_jobs.driver.current_result import read_result
from spark_jobs.snapshots import NamespaceKey, SnapshotStore

ROOT = Path(__file__).resolve().parents[2]


def write_input(path: Path, ids: list[str], *, extra_lines: list[str] = ()) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"id": key, "event_time": 1_700_000_000_000 + i * 1000, "amount": i})
        for i, key in enumerate(ids)
    ]
    path.write_text("\n".join([*lines, *extra_lines]) + "\n")


def job_args(tmp: Path, api_url: str | None, *extra: str) -> list[str]:
    args = [
        "--input",
        str(tmp / "in"),
        "--output",
        str(tmp / "out"),
        "--key-column",
        "id",
        "--snapshot-dir",
        str(tmp / "snapshots"),
        "--response-field",
        "name=$.name",
        "--response-field",
        "score=$.score:float",
        "--snapshot-interval",
        "0.5",
        "--progress-interval",
        "2",
    ]
    if api_url:
        args += ["--url-template", api_url + "/customers/{id}"]
    return args + list(extra)


def start_job(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    """``python -m spark_jobs.enrich_job`` in its own process group (so a kill takes the
    JVM and Python workers with it, as a lost machine would)."""
    return subprocess.Popen(
        [sys.executable, "-m", "spark_jobs.enrich_job", *args],
        cwd=ROOT,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def run_job(
    args: list[str], env: dict[str, str] | None = None, timeout: float = 300
) -> tuple[int, str]:
    process = start_job(args, env)
    output, _ = process.communicate(timeout=timeout)
    return process.returncode, output


def kill_group(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.communicate(timeout=30)


def read_output(out: Path) -> tuple[list[dict], list[dict], dict]:
    """The result ``out`` holds now, found as a reader finds it (through its summary)."""
    result = read_result(str(out))
    data = pq.read_table(result.data).to_pylist()
    dead = pq.read_table(result.dead_letters).to_pylist()
    return data, dead, result.summary


def run_folders(out: Path) -> list[str]:
    """The run ids whose folders are left under ``out/runs`` (``<run id>-<token>``)."""
    folders = (out / "runs").iterdir() if (out / "runs").exists() else []
    return sorted(p.name.rsplit("-", 1)[0] for p in folders)


def committed_rows(snapshot_dir: Path, key: NamespaceKey) -> list[dict]:
    """The output rows (dead letters too) the namespace's latest snapshots hold: what a
    resume replays without calling."""
    store = SnapshotStore(str(snapshot_dir))
    rows: list[dict] = []
    for number in store.partitions(key):
        snapshots = store.partition(key, number)
        manifest = snapshots.latest()
        for _kind, table in snapshots.read_segments(manifest) if manifest else ():
            rows += table.to_pylist()
    return rows
