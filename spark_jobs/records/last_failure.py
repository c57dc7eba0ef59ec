"""The run's last failure: why the job failed a run as a whole, in its job record.

The driver writes it (``driver/run_failures.py``: a systemic failure, a dead-letter
ceiling crossed) into the namespace's job record as ``last_failure``; the Airflow
operator reads it to fail its task saying why and what a retry will do. A stored one is
hostile input: :meth:`LastFailure.from_json` raises ``ValueError`` naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .values import is_count, is_text


@dataclass(frozen=True)
class LastFailure:
    """``run_id`` failed with ``exit_status`` (``spark_jobs.exit_status``) for ``reason``;
    ``retry`` says what clearing the Airflow task will do."""

    run_id: str
    reason: str
    retry: str
    exit_status: int | None = None

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {"run_id": self.run_id}
        if self.exit_status is not None:
            document["exit_status"] = self.exit_status
        return {**document, "reason": self.reason, "retry": self.retry}

    @classmethod
    def from_json(cls, document: Any, what: str = "last_failure") -> LastFailure:
        if not isinstance(document, dict):
            raise ValueError(f"{what} is not an object")
        for name in ("run_id", "reason", "retry"):
            if not is_text(document.get(name)):
                raise ValueError(f"{what}.{name}: unexpected value {document.get(name)!r:.40}")
        status = document.get("exit_status")
        if status is not None and not is_count(status):
            raise ValueError(f"{what}.exit_status: unexpected value {status!r:.40}")
        return cls(document["run_id"], document["reason"], document["retry"], status)
