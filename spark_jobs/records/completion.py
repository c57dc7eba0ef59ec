"""The completion record: a namespace whose run published (``completed.json``).

After a published success the driver replaces the snapshots by it: the fingerprint of
the job that published, its run and its summary. The same job run again finds it and
does nothing (``snapshots/resume.py``); the snapshot page and the Airflow task's
progress line show its summary. A stored one is hostile input:
:meth:`CompletionRecord.from_json` raises ``ValueError`` naming the field (its summary is
a :class:`~spark_jobs.records.summary.JobSummary`, parsed as one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .summary import JobSummary
from .values import is_text


@dataclass(frozen=True)
class CompletionRecord:
    """``run_id`` published the output of the job ``fingerprint`` names; None for a
    field a record does not hold (a hand-written or much older one)."""

    fingerprint: str | None = None
    run_id: str | None = None
    summary: JobSummary | None = None

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {}
        if self.fingerprint is not None:
            document["fingerprint"] = self.fingerprint
        if self.run_id is not None:
            document["run_id"] = self.run_id
        if self.summary is not None:
            document["summary"] = self.summary.to_json()
        return document

    @classmethod
    def from_json(cls, document: Any, what: str = "completion record") -> CompletionRecord:
        if not isinstance(document, dict):
            raise ValueError(f"{what}: not a JSON object")
        for name in ("fingerprint", "run_id"):
            if document.get(name) is not None and not is_text(document[name]):
                raise ValueError(f"{what}.{name}: unexpected value {document[name]!r:.40}")
        summary = document.get("summary")
        return cls(
            document.get("fingerprint"),
            document.get("run_id"),
            None if summary is None else JobSummary.from_json(summary, f"{what}: summary"),
        )
