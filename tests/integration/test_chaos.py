"""Runs of ``make chaos`` in the suite, on a real standalone cluster: a driver killed and
resubmitted with snapshots on a shared directory; with ``CHAOS_CI_FAULTS`` also a Python
worker killed mid-flight with snapshots on S3 (moto, ``python_worker``) and a snapshot store
that runs out of space for a while (``disk_full``, where tmpfs can be mounted).
``make chaos`` runs them all."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.chaos.__main__ import can_mount_tmpfs

from .job_support import ROOT

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_chaos_runs_lose_nothing_and_stay_within_the_call_bound():
    faults = os.environ.get("CHAOS_CI_FAULTS", "driver")
    if "disk_full" in faults and not can_mount_tmpfs():
        faults = ",".join(f for f in faults.split(",") if f != "disk_full")
    runs = len(faults.split(","))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.chaos",
            "--runs",
            str(runs),
            "--faults",
            faults,
            "--stores",
            "local,s3",
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
