"""Every entry point answers --help, and a missing Java or an unknown JIT setting is one
clear line (a port in use: tests/integration/test_demo_api.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from demo.stack import ROOT

ENTRY_POINTS = [
    "spark_jobs.enrich_job",
    "demo.api",
    "demo.generate",
    "demo.run",
    "benchmarks.operator_overhead",
    "benchmarks.http_throughput",
]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_help(module):
    result = run("-m", module, "--help")
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout


JOB_ARGS = [
    *("--input", "i", "--output", "o", "--key-column", "id", "--snapshot-dir", "s"),
    *("--url-template", "http://h/{id}", "--response-field", "n=$.n"),
]


@pytest.mark.parametrize(
    ("module", "args"), [("spark_jobs.enrich_job", JOB_ARGS), ("demo.run", [])]
)
def test_missing_java_is_one_clear_line(module, args):
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = os.path.dirname(sys.executable)  # no java on it
    result = run("-m", module, *args, env=env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Java" in lines[0] and "Traceback" not in result.stderr


def test_an_unknown_jit_setting_is_one_clear_line_before_any_jvm_starts():
    result = run(
        "-m", "spark_jobs.enrich_job", *JOB_ARGS, env={**os.environ, "ENRICH_JVM_JIT": "fast"}
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "ENRICH_JVM_JIT='fast'" in lines[0], result.stderr
