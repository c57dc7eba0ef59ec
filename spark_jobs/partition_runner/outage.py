"""Outage detection: a streak of transient failures is the API down, not bad records.

Those records must not become dead letters. So they are held back until a success
breaks the streak (then they are dead letters after all) or the streak reaches
``outage_threshold`` (then the partition stops, and they are called again on resume).
"""

from __future__ import annotations

from typing import Any

from spark_jobs.asyncwait import Failure, Result


class ApiOutageError(RuntimeError):
    """So many records in a row failed transiently that the API is down, not the records bad.

    The partition stops after a snapshot instead of dead-lettering through the outage;
    Spark's task retry (or Airflow's) resumes it, calling those records again.
    """


class OutageDetector:
    """Holds back the current streak of transient failures (``threshold`` 0: never)."""

    def __init__(self, threshold: int, partition: int) -> None:
        self.threshold = threshold
        self.partition = partition
        self.suspects: list[Failure] = []

    def __len__(self) -> int:
        return len(self.suspects)

    def take(self, output: Result | Failure) -> list[Result | Failure]:
        """The outputs to emit now, in order: none while ``output`` extends the streak.

        Raises :class:`ApiOutageError` when the streak reaches the threshold.
        """
        if isinstance(output, Failure) and output.transient and self.threshold:
            self.suspects.append(output)
            if len(self.suspects) >= self.threshold:
                raise ApiOutageError(
                    f"partition {self.partition}: API unavailable: {len(self.suspects)} "
                    f"records in a row failed after retries, last: {output.error}"
                )
            return []
        return [*self.release(), output]

    def release(self) -> list[Failure]:
        """The streak, given up as dead letters (the input ended; no outage proven)."""
        released, self.suspects = self.suspects, []
        return released

    def requeued(self) -> list[dict[str, Any]]:
        """The suspects as snapshot entries to call again, with a fresh retry budget."""
        return [{"record": s.record, "attempts": 0} for s in self.suspects]


def retry_transient(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """After an outage, queued transient failures are called again: the records are fine."""
    return [{"record": e["record"], "attempts": 0} if e.get("transient") else e for e in entries]
