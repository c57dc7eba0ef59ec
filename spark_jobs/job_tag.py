"""Cancelling a run's Spark jobs through the session, with no ``SparkContext``.

When a run loses its lease (a zombie whose successor took over) it must stop its tasks at
once. ``SparkContext.cancelAllJobs`` does not exist over Spark Connect; a job tag does,
in both: every job this thread starts carries the run's tag (``SparkSession.addTag``,
thread-local), and ``interruptTag`` from any thread (the lease's heartbeat) stops them,
over Connect as on classic Spark 4. Only this run's jobs: a session shared with other
work keeps it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

logger = logging.getLogger(__name__)


def job_tag(run_id: str) -> str:
    """The run's tag: Spark refuses an empty one or one with a comma."""
    return "enrich_job-" + re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)


@contextmanager
def tagged_jobs(spark: Any, run_id: str) -> Iterator[Callable[[], None]]:
    """Tag the jobs this thread starts inside the block; yields the run's cancel."""
    tag = job_tag(run_id)
    spark.addTag(tag)

    def cancel() -> None:
        stopped = spark.interruptTag(tag)
        logger.warning("cancelled %d running Spark operation(s) of this run", len(stopped))

    try:
        yield cancel
    finally:
        spark.removeTag(tag)
