"""Operator counters: what one ``run`` did with its records."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class OperatorMetrics:
    """Counters, cumulative over one ``run``; plain integer increments, so they cost
    nothing beside a call (no per-record timing or sampling)."""

    in_flight: int = 0
    completed: int = 0
    failed: int = 0
    retried: int = 0
    timed_out: int = 0
    emitted: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "in_flight": self.in_flight,
            "completed": self.completed,
            "failed": self.failed,
            "retried": self.retried,
            "timed_out": self.timed_out,
            "emitted": self.emitted,
        }
