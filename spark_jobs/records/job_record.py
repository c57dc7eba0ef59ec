"""The job record: what a run is (``job.json`` of its snapshot namespace).

The driver writes it when it opens a namespace: the fingerprint of the run's inputs and
enrichment, the parts it is made of, and the number of input records; a run the job
failed as a whole adds its :class:`~spark_jobs.records.last_failure.LastFailure`. The
resume decision (``snapshots/resume.py``) compares it part by part with the previous
run's, and the Airflow operator reads the size and the failure.

A stored record is hostile input: :meth:`JobRecord.from_json` raises ``ValueError``
naming the field. A missing field takes the value older versions meant by leaving it out
(an empty part, an unknown size, no failure); an unknown field is ignored (a newer
version may add some; the driver writes its own record whole).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .last_failure import LastFailure
from .values import is_count, is_text


@dataclass(frozen=True)
class JobRecord:
    """``fingerprint`` digests ``inputs`` (file -> size and modification time),
    ``enrichment`` (its identity by name), ``reader`` (set for a reader that is not the
    default one) and ``dead_letter_retry`` (the classes a retry chose)."""

    fingerprint: str = ""
    inputs: Mapping[str, Any] = field(default_factory=dict)
    enrichment: Mapping[str, Any] = field(default_factory=dict)
    reader: Any = None
    dead_letter_retry: Any = None
    records_in: int | None = None
    last_failure: LastFailure | None = None

    def failed(self, failure: LastFailure) -> JobRecord:
        """This record with the run's failure, for the Airflow operator."""
        return replace(self, last_failure=failure)

    def identity(self) -> dict[str, Any]:
        """The parts the fingerprint digests: ``reader`` and ``dead_letter_retry`` only
        when set (absent, as before, for a plain run read as always)."""
        parts: dict[str, Any] = {"inputs": dict(self.inputs), "enrichment": dict(self.enrichment)}
        for name in ("reader", "dead_letter_retry"):
            if getattr(self, name) is not None:
                parts[name] = getattr(self, name)
        return parts

    def to_json(self) -> dict[str, Any]:
        document = self.identity()
        document["fingerprint"] = self.fingerprint
        if self.records_in is not None:
            document["records_in"] = self.records_in
        if self.last_failure is not None:
            document["last_failure"] = self.last_failure.to_json()
        return document

    @classmethod
    def from_json(cls, document: Any, what: str = "job record") -> JobRecord:
        if not isinstance(document, dict):
            raise ValueError(f"{what} is not an object")
        checks = {
            "fingerprint": is_text,
            "inputs": lambda v: isinstance(v, dict),
            "enrichment": lambda v: isinstance(v, dict),
            "records_in": is_count,
        }
        for name, valid in checks.items():
            if name in document and not valid(document[name]):
                raise ValueError(f"{what}.{name}: unexpected value {document[name]!r:.40}")
        failure = document.get("last_failure")
        return cls(
            fingerprint=document.get("fingerprint", ""),
            inputs=document.get("inputs", {}),
            enrichment=document.get("enrichment", {}),
            reader=document.get("reader"),
            dead_letter_retry=document.get("dead_letter_retry"),
            records_in=document.get("records_in"),
            last_failure=None if failure is None else LastFailure.from_json(failure),
        )
