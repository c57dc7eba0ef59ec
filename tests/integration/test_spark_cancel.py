"""Cancelling a run's jobs without a ``SparkContext`` on classic Spark: the lease's
heartbeat thread interrupts what the driver thread runs, through the session's
interrupt API (the same call works over Spark Connect, where the crash/resume test's
fenced-off run takes it)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from spark_jobs.session.spark_session import cancel_running

pytestmark = pytest.mark.spark


def test_a_running_job_is_cancelled_from_another_thread(spark, tmp_path):
    started = str(tmp_path / "started")

    def stuck(value: int) -> int:
        Path(started).touch()
        time.sleep(180)  # far longer than a cancel takes: a job that ends was not cancelled
        return value

    def cancel_once_running() -> None:
        deadline = time.monotonic() + 300
        while not Path(started).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        cancel_running(spark)

    from pyspark.sql import functions as F

    frame = spark.range(0, 2, 1, 2).select(F.udf(stuck, "long", useArrow=False)("id"))
    canceller = threading.Thread(target=cancel_once_running)
    canceller.start()
    with pytest.raises(Exception, match="SPARK_JOB_CANCELLED"):
        frame.collect()
    canceller.join()
    assert spark.range(3).count() == 3, "the session works on after the cancel"
