"""Shipping the job's environment to executors that have none of it: a standalone cluster
whose workers run a bare Python (no aiohttp, no pyarrow, no spark_jobs). Without the packed
environment the job stops at once naming what is missing; with ``--ship-env`` and the PEX
from ``make dist`` the output is exact."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from demo.stack import demo_api

from .job_support import ROOT, job_args, read_output, run_job, write_input
from .spark_cluster import standalone_cluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def pex() -> Path:
    result = subprocess.run(
        ["make", "dist"], cwd=ROOT, capture_output=True, text=True, timeout=900, check=False
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return ROOT / "dist" / "enrich_env.pex"


@pytest.fixture
def bare_python(tmp_path) -> Path:
    """A Python with nothing installed: what a fresh cluster node has."""
    subprocess.run(
        [
            sys.base_prefix + "/bin/python3.11",
            "-m",
            "venv",
            "--without-pip",
            str(tmp_path / "bare"),
        ],
        check=True,
    )
    python = tmp_path / "bare" / "bin" / "python3.11"
    probe = subprocess.run([str(python), "-c", "import aiohttp"], capture_output=True, check=False)
    assert probe.returncode != 0, "the bare Python is not bare"
    return python


def test_bare_executors_need_the_shipped_environment_and_then_enrich_exactly(
    tmp_path, pex, bare_python
):
    ids = [f"k{i:04d}" for i in range(300)]
    for run in ("without", "with"):
        write_input(tmp_path / run / "in" / "part.jsonl", ids)
    # The workers (and so their executors) find only the bare Python on their PATH: the
    # PEX's `#!/usr/bin/env python3.11` runs it, and nothing else leaks in.
    worker_env = {"PATH": f"{bare_python.parent}:{os.environ['PATH']}", "PYTHONPATH": ""}
    env = {"PYSPARK_PYTHON": str(bare_python), "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": ""}
    with (
        demo_api() as api,
        standalone_cluster(tmp_path, workers=1, cores=2, worker_env=worker_env) as master,
    ):
        env["SPARK_MASTER"] = master
        code, log = run_job(job_args(tmp_path / "without", api.url, "--partitions", "2"), env)
        assert code == 3, log[-3000:]
        assert (
            "the executors' Python lacks aiohttp, fsspec, pyarrow, spark_jobs, uvloop, yaml" in log
        ), log[-3000:]
        assert api.calls_per_key() == {}
        args = job_args(tmp_path / "with", api.url, "--partitions", "2", "--ship-env", str(pex))
        code, log = run_job(args, env)
        assert code == 0, log[-5000:]
    data, dead, summary = read_output(tmp_path / "with" / "out")
    assert sorted(r["id"] for r in data) == ids and not dead
    assert summary["requests_made"] == len(ids)
