"""A newcomer's first command: ``make demo`` from a fresh clone in a temporary directory
(only the pip cache is shared), checked on its summary: resumed after the planned
outage, every record written exactly once, calls saved by resume, and a second day that
pays only for new customers."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# CI is itself a fresh clone running make test; this adds make demo on top of it.
pytestmark = [pytest.mark.slow, pytest.mark.extended]


def clean_environment() -> dict[str, str]:
    """The caller's environment without this checkout's virtualenv or settings."""
    venv_bin = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != venv_bin)
    skip = ("VIRTUAL_ENV", "PYSPARK_", "AIRFLOW", "SPARK_", "PYTHONPATH")
    return {**{k: v for k, v in os.environ.items() if not k.startswith(skip)}, "PATH": path}


def summary_value(output: str, name: str) -> str:
    match = re.search(rf"^{re.escape(name)}\s+(.+)$", output, re.MULTILINE)
    assert match, f"no '{name}' line in the summary:\n{output[-3000:]}"
    return match.group(1).strip()


def test_make_demo_from_a_fresh_clone(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    result = subprocess.run(
        ["make", "demo"],
        cwd=clone,
        env=clean_environment(),
        capture_output=True,
        text=True,
        timeout=1500,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    assert (clone / ".venv" / "bin" / "python").exists(), "make demo created the virtualenv"
    assert summary_value(output, "resumed") == "True"
    assert summary_value(output, "exactly once") == "yes"
    assert int(summary_value(output, "calls saved by resume")) > 0
    records = int(summary_value(output, "records"))
    assert records == int(summary_value(output, "rows written (data + dead letters)"))
    assert "first try failed during the outage" in output
    # Between the tries the progress line says what happens, not the failed try's figures.
    waiting = re.search(
        r"try 1 failed \(API outage\); Airflow retries (?:in \d+ s|now)[^;]*; "
        r"([\d ]+) records are safe in snapshots",
        output,
    )
    assert waiting, output[-5000:]
    assert int(waiting.group(1).replace(" ", "")) > 0
    # Day 2 brings back day 1's customers: the response cache answers most of them.
    assert summary_value(output, "day 2 exactly once") == "yes"
    day_2_records = int(summary_value(output, "day 2 (2024-01-02) records"))
    day_2_calls = int(summary_value(output, "day 2 API calls").split()[0])
    assert day_2_calls < day_2_records / 4
