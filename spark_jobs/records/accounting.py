"""The summary's ``accounting``: whether its call counts are exact or a lower bound.

Calls are counted where they are paid, by each attempt in its own record
(``snapshots/attempt_counts.py``), which a cut rewrites; an attempt cut short (killed,
lost, fenced off, failed) made calls after its last record that no file holds. The
summary then says so instead of passing a lower bound off as the bill: ``calls`` is
``"exact"`` or ``"lower_bound"``, and a lower bound is short by at most one
``--snapshot-interval`` of calls for each attempt cut short. The driver counts it
(``driver/accounting.py``); the summary's readers read it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal

from .values import is_count

Exactness = Literal["exact", "lower_bound"]


@dataclass(frozen=True)
class Accounting:
    """``attempts``: attempt records found; ``attempts_cut_short``: those that ended
    after their last record, and ``unreadable_records``: records that could not be read
    (both make ``calls`` a lower bound); ``unrecorded_partitions``: partitions whose
    manifests count more calls than their attempt records (attempts written before
    records were kept: the manifests' figure is used, a lower bound too)."""

    attempts: int = 0
    attempts_cut_short: int = 0
    unreadable_records: int = 0
    unrecorded_partitions: int = 0

    @property
    def calls(self) -> Exactness:
        missing = self.attempts_cut_short + self.unreadable_records + self.unrecorded_partitions
        return "lower_bound" if missing else "exact"

    def to_json(self) -> dict[str, Any]:
        return {"calls": self.calls, **{f.name: getattr(self, f.name) for f in fields(self)}}

    @classmethod
    def from_json(cls, document: Any, what: str = "accounting") -> Accounting:
        """A stored one; a summary written before accounting existed holds none (``{}``:
        no attempt counted)."""
        if not isinstance(document, dict):
            raise ValueError(f"{what} is not an object")
        if document.get("calls", "exact") not in ("exact", "lower_bound"):
            raise ValueError(f"{what}.calls: unexpected value {document['calls']!r:.40}")
        values = {f.name: document.get(f.name, 0) for f in fields(cls)}
        for name, value in values.items():
            if not is_count(value):
                raise ValueError(f"{what}.{name}: unexpected value {value!r:.40}")
        return cls(**values)
