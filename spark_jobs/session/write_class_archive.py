"""Write the driver JVM's class archive (``class_archive.py``): ``make jvm-archive``,
``python -m spark_jobs.session.write_class_archive``, or an image's build
(docker/Dockerfile). A run never writes it.

The archive holds the classes a JVM loaded, so this launches a JVM of its own the way the
job's is launched (Spark's ``bin/spark-submit``: the same class path), with HotSpot's
public ``-XX:ArchiveClassesAtExit``, running a small job's steps through a Python driver
(reading JSON lines, a hash partitioning and its count, a shuffle and a sort,
``mapInArrow`` through a Python worker, a cached Parquet write), and waits for it: the
JVM writes the archive as it exits, under a name of its own, renamed into place once
whole with its size in its name. An archive already in place is kept if a JVM that must
map it starts (``-Xshare:on``, ``spark-submit --version``), and written anew otherwise
(another Java build behind the same path, a damaged file).
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from spark_jobs.session.class_archive import (
    QUIET,
    SETTING,
    ClassArchive,
    archive_folder,
    archive_name,
    cds_chosen_elsewhere,
    class_archive,
    open_folder,
    spark_home,
)
from spark_jobs.session.jvm import launching
from spark_jobs.session.spark_session import spark_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

#: How long the JVM may take to run the steps and write the archive (some 30 s on 2 cores).
TIMEOUT_S = 600.0
#: A partial archive older than this is a killed writer's.
STALE_PARTIAL_S = 3600.0
#: What the JVM launched here runs under spark-submit: the steps, in its Python driver.
_STEPS = """import sys
from spark_jobs.session.write_class_archive import run_steps
run_steps(sys.argv[1])
"""


def write_now() -> str:
    """Write the archive unless one that maps is in place; says what it did. Raises
    OSError (UnsafeFolder: why) for a folder not the user's alone, RuntimeError when no
    archive was written."""
    folder = archive_folder(os.environ)
    if folder is None or cds_chosen_elsewhere(os.environ):
        return f"no JVM class archive: {SETTING} is off, or CDS options are set already"
    existing = class_archive()
    if existing is not None:
        if jvm_maps(existing):
            return f"the JVM class archive is in place: {existing.path}"
        logger.warning("the JVM cannot map %s: writing it anew", existing.path)
        existing.path.unlink()
    folder.parent.mkdir(parents=True, exist_ok=True)
    open_folder(folder).close()  # the user's own, not a symlink, not writable by others
    _remove_stale_partials(folder)
    name = archive_name(os.environ)
    partial = folder / f"{name}.{os.getpid()}.partial"
    try:
        _launch(f"{QUIET} -XX:ArchiveClassesAtExit={partial}", "steps")
        if not partial.exists():
            raise RuntimeError(f"the JVM wrote no class archive at {partial}")
        os.replace(partial, folder / f"{name}-{partial.stat().st_size}.jsa")
    finally:
        partial.unlink(missing_ok=True)
    written = class_archive()
    if written is None or not jvm_maps(written):
        raise RuntimeError(f"no JVM class archive that maps was written in {folder}")
    return f"wrote the JVM class archive {written.path}"


def jvm_maps(archive: ClassArchive) -> bool:
    """Whether a JVM launched as the job's starts with ``archive`` mapped (``-Xshare:on``
    stops one that cannot map it)."""
    try:
        _launch(f"{archive.java_options} -Xshare:on", "--version")
    except RuntimeError as error:
        logger.info("%s", error)
        return False
    return True


def _launch(java_options: str, what: str) -> None:
    """``spark-submit`` with ``java_options`` after the user's own: ``--version``, or the
    steps in a Python driver of this interpreter; raises RuntimeError unless it ends well."""
    submit = os.path.join(spark_home(os.environ), "bin", "spark-submit")
    with tempfile.TemporaryDirectory() as work, launching(java_options):
        if what == "steps":
            (Path(work) / "steps.py").write_text(_STEPS)
            command = [submit, "--master", "local[2]", str(Path(work) / "steps.py"), work]
        else:
            command = [submit, what]
        env = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
        done = subprocess.run(
            command,
            env={**env, **os.environ},
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-2000:]
        raise RuntimeError(
            f"spark-submit {what} with {java_options}: exit {done.returncode}\n{tail}"
        )


def _remove_stale_partials(folder: Path) -> None:
    """Partial archives of writers that were killed while writing."""
    for partial in folder.glob("*.partial"):
        with contextlib.suppress(OSError):
            if time.time() - partial.stat().st_mtime > STALE_PARTIAL_S:
                partial.unlink()


def run_steps(folder: str) -> None:
    """The steps of a job, in the Python driver of the JVM launched by :func:`_launch`."""
    spark = spark_session(None)  # spark-submit's JVM: the one writing the archive
    try:
        _run_job_steps(spark, Path(folder))
    finally:
        spark.stop()


def _run_job_steps(spark: SparkSession, folder: Path) -> None:
    from pyspark.sql import functions as F

    (folder / "in.jsonl").write_text('{"id": "a", "n": 1}\n{"id": "b", "n": 2}\n')
    frame = spark.read.json(str(folder / "in.jsonl"))
    frame.groupBy(F.pmod(F.hash("id"), F.lit(2))).count().collect()
    ordered = frame.repartition(2, "id").sortWithinPartitions("id")
    enriched = ordered.mapInArrow(lambda batches: batches, frame.schema).cache()
    enriched.write.mode("overwrite").parquet(str(folder / "out"))


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        print(write_now())
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as error:
        print(f"write_class_archive: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
