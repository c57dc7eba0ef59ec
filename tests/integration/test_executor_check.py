"""The executors' check (``session/executor_check.py``) in Spark ``local`` mode, where it now
runs beside the input's reading: a worker Python that lacks the job's packages still stops
the run before any call, naming what is missing, and nothing is published."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from demo.stack import demo_api

from .job_support import job_args, run_job, write_input

pytestmark = [pytest.mark.spark]


@pytest.fixture
def bare_python(tmp_path) -> Path:
    """A Python with nothing installed (no aiohttp, no pyarrow)."""
    home = tmp_path / "bare"
    subprocess.run([sys.base_prefix + "/bin/python3.11", "-m", "venv", "--without-pip", str(home)])
    python = home / "bin" / "python3.11"
    probe = subprocess.run([str(python), "-c", "import aiohttp"], capture_output=True, check=False)
    assert probe.returncode != 0, "the bare Python is not bare"
    return python


def test_local_workers_without_the_packages_stop_the_run_before_any_call(tmp_path, bare_python):
    write_input(tmp_path / "in" / "part.jsonl", [f"k{i:03d}" for i in range(50)])
    env = {"PYSPARK_PYTHON": str(bare_python), "SPARK_MASTER": "local[2]"}
    with demo_api() as api:
        code, log = run_job(job_args(tmp_path, api.url, "--partitions", "2"), env)
        assert code == 3, log[-3000:]
        assert "the executors' Python lacks aiohttp" in log, log[-3000:]
        assert api.calls_per_key() == {}
    assert not (tmp_path / "out" / "_SUMMARY.json").exists()
