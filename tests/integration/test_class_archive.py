"""The driver JVM's class archive with real JVMs: the job's first run writes it, later
sessions map it (the archive shows in the JVM's memory maps), and an archive damaged on
disk never stops a session from starting. Beside it, the JIT options a launched JVM runs
with (``driver_jvm.py``), as the JVM itself reports them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from demo.stack import demo_api

from .job_support import ROOT, job_args, write_input

pytestmark = [pytest.mark.spark, pytest.mark.slow]

QUICK = "-XX:TieredStopAtLevel=1"

#: A session as the job opens one, reporting which of the folder's archives its JVM has
#: mapped (the JDK's own base archive is mapped too) and its JIT options.
SESSION = """
import json, os, sys
from pyspark import SparkContext
from spark_jobs.driver.class_archive import keep_written
from spark_jobs.driver.spark_session import spark_session
spark, archive = spark_session(None)
jvm = SparkContext._gateway.proc.pid
with open(f"/proc/{jvm}/maps") as maps:
    files = {line.split()[-1] for line in maps if line.rstrip().endswith(".jsa")}
folder = os.environ["ENRICH_JVM_CLASS_ARCHIVE"]
mapped = sorted(path for path in files if path.startswith(folder))
arguments = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
jit = [str(argument) for argument in arguments if "Tiered" in str(argument)]
rows = spark.range(3).count()
spark.stop()
keep_written(archive)
print(json.dumps({"mapped": mapped, "jit": jit, "rows": rows}))
"""


def environment(folder: Path) -> dict[str, str]:
    """The archives in ``folder``; the JIT left to the job (the suite's own JIT choice for
    its JVMs, in tests/conftest.py, would be the user's, which the job leaves alone)."""
    return {
        **os.environ,
        "SPARK_SUBMIT_OPTS": "-XX:+UseSerialGC",
        "PYSPARK_PYTHON": sys.executable,
        "ENRICH_JVM_CLASS_ARCHIVE": str(folder),
    }


def open_session(folder: Path, **settings: str) -> dict:
    """A session through spark_session(), with the environment's ``settings``; the JVM's
    crash report, if any, in ``folder``'s parent."""
    done = subprocess.run(
        [sys.executable, "-c", SESSION],
        cwd=folder.parent,
        env={**environment(folder), "PYTHONPATH": str(ROOT), **settings},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def archives(folder: Path) -> list[Path]:
    return sorted(folder.iterdir())


@pytest.fixture(scope="module")
def first_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """The job run once with an empty archive folder: what it printed, and the folder."""
    work = tmp_path_factory.mktemp("first_run")
    write_input(work / "in" / "part.jsonl", [f"k{i}" for i in range(20)])
    with demo_api() as api:
        done = subprocess.run(
            [sys.executable, "-m", "spark_jobs.enrich_job", *job_args(work, api.url)],
            cwd=ROOT,
            env=environment(work / "jvm"),
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    return done, work / "jvm"


def test_the_first_run_writes_the_archive_and_later_sessions_map_it(first_run):
    done, folder = first_run
    assert done.returncode == 0, done.stderr[-3000:]
    # The job's stdout is its summary alone: none of the JVM's CDS warnings.
    assert json.loads(done.stdout)["records_in"] == 20
    (archive,) = archives(folder)  # whole, under its own name: no partial file left
    assert archive.suffix == ".jsa" and archive.stat().st_size > 0
    assert "writing the driver JVM's class archive once" in done.stderr

    session = open_session(folder)
    assert session == {"mapped": [str(archive)], "jit": [QUICK], "rows": 3}


def test_full_jit_keeps_the_jvms_own_tiers_beside_the_archive(first_run):
    (archive,) = archives(first_run[1])
    session = open_session(first_run[1], ENRICH_JVM_JIT="full")
    assert session == {"mapped": [str(archive)], "jit": [], "rows": 3}


@pytest.mark.parametrize("damage", ["truncated, renamed to fit", "bytes flipped"])
def test_a_damaged_archive_never_stops_a_session(first_run, tmp_path, damage):
    """Cut short and named as if whole, the JVM crashes on it and starts again without it;
    altered, the JVM's own check refuses it. (Cut short under its name, which says its
    size, it is deleted before any launch: tests/unit/test_class_archive.py.)"""
    (written,) = archives(first_run[1])
    content = bytearray(written.read_bytes())
    name = written.name
    if damage.startswith("truncated"):
        content = content[: len(content) // 3]
        name = f"{name.rsplit('-', 1)[0]}-{len(content)}.jsa"
    else:
        for at in range(len(content) // 4, len(content), len(content) // 16):
            content[at] ^= 0xFF
    folder = tmp_path / "jvm"
    folder.mkdir()
    (folder / name).write_bytes(bytes(content))

    session = open_session(folder)
    assert session["rows"] == 3
    # The JVM ran without it (its JIT options kept), and it is gone: this run or the next
    # writes a whole one.
    assert session["mapped"] == [] and session["jit"] == [QUICK]
    assert not (folder / name).exists()
    assert archives(folder) == []
