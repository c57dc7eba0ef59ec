"""A few runs of ``make chaos`` in the suite: a driver killed and resubmitted, and a Python
worker killed mid-flight, on a real standalone cluster. ``make chaos`` runs them all."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .job_support import ROOT

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_chaos_runs_lose_nothing_and_stay_within_the_call_bound():
    faults = os.environ.get("CHAOS_CI_FAULTS", "driver,python_worker")
    runs = len(faults.split(","))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.chaos",
            "--runs",
            str(len(faults.split(","))),
            "--faults",
            faults,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    last = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    print(result.stdout[-3000:])
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    assert last.startswith(f"CHAOS runs={runs} lost=0 duplicated=0 ") and last.endswith(
        " failures=0"
    )
