"""The job's exit statuses, in one place.

``spark-submit`` passes the driver's status through, and the values are a contract: the
docs (job-spec.md) document them and Airflow tells a run that failed as a whole (6, 7: no automatic
retry) from one that a retry resumes. Never renumber a member. Standard library only, so
the Airflow side can import it without Spark.
"""

from __future__ import annotations

from enum import IntEnum


class ExitStatus(IntEnum):
    """What ``python -m spark_jobs.enrich_job`` exits with."""

    DONE = 0
    """The run finished and its output is published (or ``--estimate`` printed)."""
    BAD_OPTIONS = 2
    """The options are invalid (as ``argparse`` exits on a usage error): nothing ran."""
    CANNOT_RUN = 3
    """The job cannot run as asked: resume refused, executors lack the environment."""
    BUDGET_SPENT = 4
    """``--max-requests`` or ``--max-cost`` was spent: a snapshot is committed and a run
    again resumes."""
    LEASE_HELD = 5
    """Fenced off, or another run holds the namespace's lease."""
    SYSTEMIC_FAILURE = 6
    """A systemic failure (a bad key, one permanent error for record after record):
    nothing published, snapshots kept; fix the cause and run again."""
    DEAD_LETTER_CEILING = 7
    """The dead letters crossed ``--max-dead-letters``: nothing published, snapshots kept
    (a rerun replays them without calls)."""
    BATCHES_RUNNING = 8
    """``--detach-batches``: records wait in provider batches still running; a snapshot
    is committed, and a run again once they ended reads their rows."""
