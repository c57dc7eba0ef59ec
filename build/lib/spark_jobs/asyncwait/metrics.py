"""Operator metrics: counters plus enqueue-to-emit latency percentiles."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class OperatorMetrics:
    """Counters are cumulative over one ``run``; latencies keep the most recent samples so
    memory stays bounded on endless partitions."""

    in_flight: int = 0
    completed: int = 0
    failed: int = 0
    retried: int = 0
    timed_out: int = 0
    emitted: int = 0
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=10_000))

    def latency_percentiles(self, *percentiles: float) -> dict[str, float]:
        """Seconds from enqueue to emit, e.g. ``{"p50": 0.01, "p99": 0.05}``."""
        wanted = percentiles or (50.0, 95.0, 99.0)
        ordered = sorted(self.latencies)
        if not ordered:
            return {f"p{p:g}": 0.0 for p in wanted}
        last = len(ordered) - 1
        return {f"p{p:g}": ordered[min(last, round(p / 100 * last))] for p in wanted}

    def as_dict(self) -> dict[str, float | int]:
        return {
            "in_flight": self.in_flight,
            "completed": self.completed,
            "failed": self.failed,
            "retried": self.retried,
            "timed_out": self.timed_out,
            "emitted": self.emitted,
            **{f"latency_{k}_s": v for k, v in self.latency_percentiles().items()},
        }
