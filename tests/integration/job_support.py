"""Helpers for tests that run the real Spark job against a real HTTP API on loopback."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class DemoApi:
    """The demo API as its own process, with /stats and /faults helpers."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "demo.api", "--port", str(self.port), *args],
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                self.get("/health")
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("demo API did not start")

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=5) as response:
            return json.loads(response.read())

    def post(self, path: str, body: dict | None = None, method: str = "POST") -> Any:
        request = urllib.request.Request(
            self.url + path,
            data=json.dumps(body or {}).encode(),
            headers={"Content-Type": "application/json"},
            method=method,
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read() or b"{}")

    def heal(self) -> None:
        """Back to the knobs the server started with (ends an injected outage)."""
        self.post("/faults", method="DELETE")

    def calls_per_key(self) -> Counter:
        return Counter(self.get("/stats")["per_key"])

    def settled_calls(self) -> int:
        """Total calls once requests of a killed client still in the server are counted."""
        last = -1
        while True:
            total = sum(self.calls_per_key().values())
            if total == last:
                return total
            last = total
            time.sleep(0.3)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


@contextmanager
def demo_api(*args: str, env: dict[str, str] | None = None):
    api = DemoApi(*args, env=env)
    try:
        yield api
    finally:
        api.stop()


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
    data = pq.read_table(out / "data").to_pylist()
    dead = pq.read_table(out / "dead_letters").to_pylist()
    summary = json.loads((out / "_SUMMARY.json").read_text())
    return data, dead, summary
