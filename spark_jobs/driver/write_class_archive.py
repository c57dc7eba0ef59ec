"""Write the driver JVM's class archive now (``class_archive.py``), from a local session
running the steps of a job: a machine's set-up or an image's build, so that no run pays
for writing it. ``python -m spark_jobs.driver.write_class_archive``; ``make jvm-archive``.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from spark_jobs.driver.class_archive import SETTING, class_archive, keep_written
from spark_jobs.driver.spark_session import spark_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def write_now() -> str:
    """Write the archive now, from a local session running the steps of a job (reading
    JSON lines, a hash partitioning, a sort, a count, ``mapInArrow``, a cached Parquet
    write): a machine's set-up or an image's build, so that no run pays for writing it.
    Says what it did."""
    archive = class_archive()
    if archive is None:
        return f"no JVM class archive: {SETTING} is off, or CDS options are set already"
    if archive.writing is None:
        return f"the JVM class archive exists: {archive.path}"
    spark, launched = spark_session(None)  # writes the archive: there is none yet
    try:
        with tempfile.TemporaryDirectory() as folder:
            _run_job_steps(spark, Path(folder))
    finally:
        spark.stop()
        keep_written(launched)
    written = class_archive()
    if written is None or written.writing is not None:
        raise RuntimeError(f"the JVM class archive was not written: {archive.path}")
    return f"wrote the JVM class archive {written.path}"


def _run_job_steps(spark: SparkSession, folder: Path) -> None:
    from pyspark.sql import functions as F

    (folder / "in.jsonl").write_text('{"id": "a", "n": 1}\n{"id": "b", "n": 2}\n')
    frame = spark.read.json(str(folder / "in.jsonl"))
    frame.groupBy(F.pmod(F.hash("id"), F.lit(2))).count().collect()
    ordered = frame.repartition(2, "id").sortWithinPartitions("id")
    enriched = ordered.mapInArrow(lambda batches: batches, frame.schema).cache()
    enriched.write.mode("overwrite").parquet(str(folder / "out"))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    print(write_now())
