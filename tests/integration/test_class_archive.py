"""The driver JVM's class archive with real JVMs: a run never writes it, the explicit
command does (``write_class_archive.py``), later sessions map it (the archive shows in
the JVM's memory maps), and an archive damaged on disk never stops a session from
starting. Beside it, the JIT options a launched JVM runs with (``session/jvm.py``), as the
JVM's command line shows them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from demo.stack import demo_api
from spark_jobs.session.class_archive import ClassArchive
from spark_jobs.session.write_class_archive import jvm_maps

from .job_support import ROOT, job_args, write_input

pytestmark = [pytest.mark.spark, pytest.mark.slow]

QUICK = "-XX:TieredStopAtLevel=1"

#: A session as the job opens one, reporting which of the folder's archives its JVM (this
#: process's child) has mapped (the JDK's own base archive is mapped too) and its JIT
#: options, read from /proc.
SESSION = """
import json, os
from spark_jobs.session.spark_session import spark_session
spark = spark_session(None)
def parent(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except OSError:  # ended meanwhile
        return None
(jvm,) = [p for p in os.listdir("/proc") if p.isdigit() and parent(p) == os.getpid()]
with open(f"/proc/{jvm}/maps") as maps:
    files = {line.split()[-1] for line in maps if line.rstrip().endswith(".jsa")}
with open(f"/proc/{jvm}/cmdline") as cmdline:
    jit = [word for word in cmdline.read().split("\\0") if "Tiered" in word]
folder = os.environ["ENRICH_JVM_CLASS_ARCHIVE"]
mapped = sorted(path for path in files if path.startswith(folder))
rows = spark.range(3).count()
spark.stop()
print(json.dumps({"mapped": mapped, "jit": jit, "rows": rows}))
"""


def environment(folder: Path) -> dict[str, str]:
    """The archives in ``folder``; no Java options of the user's (the JIT is the job's)."""
    env = {name: value for name, value in os.environ.items() if name != "SPARK_SUBMIT_OPTS"}
    return {**env, "PYSPARK_PYTHON": sys.executable, "ENRICH_JVM_CLASS_ARCHIVE": str(folder)}


def run(args: list[str], folder: Path, **settings: str) -> subprocess.CompletedProcess:
    """This interpreter with ``args``; the JVM's crash report, if any, in ``folder``'s parent."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=folder.parent,
        env={**environment(folder), "PYTHONPATH": str(ROOT), **settings},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def open_session(folder: Path, **settings: str) -> dict:
    """A session through spark_session(), with the environment's ``settings``."""
    done = run(["-c", SESSION], folder, **settings)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def archives(folder: Path) -> list[Path]:
    return sorted(folder.iterdir())


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """``python -m spark_jobs.session.write_class_archive`` into an empty folder."""
    folder = tmp_path_factory.mktemp("written") / "jvm"
    return run(["-m", "spark_jobs.session.write_class_archive"], folder), folder


def test_a_run_writes_no_archive(tmp_path):
    write_input(tmp_path / "in" / "part.jsonl", [f"k{i}" for i in range(20)])
    folder = tmp_path / "jvm"
    with demo_api() as api:
        done = run(["-m", "spark_jobs.enrich_job", *job_args(tmp_path, api.url)], folder)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["records_in"] == 20  # stdout is the summary alone
    assert not folder.exists()
    assert "`make jvm-archive` writes one" in done.stderr


def test_the_command_writes_the_archive_and_sessions_map_it(written):
    done, folder = written
    assert done.returncode == 0, done.stderr[-3000:]
    (archive,) = archives(folder)  # whole, under its own name: no partial file left
    assert archive.suffix == ".jsa" and archive.stat().st_size > 0
    assert done.stdout.strip() == f"wrote the JVM class archive {archive}"
    assert open_session(folder) == {"mapped": [str(archive)], "jit": [], "rows": 3}

    again = run(["-m", "spark_jobs.session.write_class_archive"], folder)
    assert again.stdout.strip() == f"the JVM class archive is in place: {archive}"
    assert archives(folder) == [archive]


def test_quick_jit_runs_c1_alone_beside_the_archive(written):
    (archive,) = archives(written[1])
    session = open_session(written[1], ENRICH_JVM_JIT="quick")
    assert session == {"mapped": [str(archive)], "jit": [QUICK], "rows": 3}


@pytest.mark.parametrize("damage", ["truncated, renamed to fit", "bytes flipped"])
def test_a_damaged_archive_never_stops_a_session(written, tmp_path, damage):
    """Cut short and named as if whole, the JVM crashes on it and starts again without it,
    and it is deleted; altered, the JVM's own check refuses it, and the command writes
    it anew (its check, a JVM that must map it, fails). (Cut short under its name, which
    says its size, it is deleted before any launch: tests/unit/test_class_archive.py.)"""
    (archive,) = archives(written[1])
    content = bytearray(archive.read_bytes())
    name = archive.name
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
    assert session == {"mapped": [], "jit": [], "rows": 3}
    if damage.startswith("truncated"):
        assert archives(folder) == []
    else:
        assert archives(folder) == [folder / name]
        assert not jvm_maps(ClassArchive(folder / name)) and jvm_maps(ClassArchive(archive))
