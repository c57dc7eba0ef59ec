"""The counters a manifest carries: this attempt's, added to those of the attempts before.

The attempt resumed from left its counters in its manifest; carrying them on makes the
last manifest's stats describe the chain of attempts that led to it (each counted up to
its last cut), and ``run_requests`` lets a retried attempt of the same run keep within
the run's request budget. Calls off that chain (after an attempt's last cut, or by an
attempt whose manifests were superseded) are counted by the attempt records instead
(``snapshots/attempt_counts.py``), from ``own``: this attempt's counters alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from spark_jobs.snapshots import Manifest
from spark_jobs.snapshots.contracts import PartitionStats


class RunStats:
    """Counters for the next cut's manifest; ``counters`` is the enrichment's own."""

    def __init__(self, resumed: Manifest | None, run_id: str) -> None:
        self.resumed = resumed
        self.run_id = run_id
        #: The stats of the manifest resumed from (nothing counted: a first attempt).
        self.before = (
            PartitionStats() if resumed is None else PartitionStats.from_json(resumed.stats)
        )
        self.counters: Callable[[], dict[str, int]] = dict
        #: The enrichment's answers of the last minute by outcome (not carried on: recent).
        self.recent_calls: Callable[[], dict[str, int]] = dict
        self.own: dict[str, int] = {}  # this attempt's counters at the last cut
        self.replayed = 0
        self.rss_first_cut = 0.0  # worker memory, to show it stays flat
        self.rss_peak = 0.0

    def run_requests_before(self) -> int:
        """Requests earlier attempts of this same run made (the budget is per run)."""
        if self.resumed is None or self.before.run_id != self.run_id:
            return 0
        return self.before.run_requests

    def at_cut(
        self,
        *,
        final: bool,
        budget_exhausted: bool,
        in_flight: int,
        batches_running: bool = False,
        systemic_failure: str | None = None,
    ) -> dict[str, Any]:
        """The next manifest's ``stats`` (:class:`PartitionStats`' stored form).
        ``systemic_failure`` is the reason this attempt stopped as one (the driver fails
        the run with it), None for any other cut."""
        rss_mb = rss_now_mb()
        self.rss_first_cut = self.rss_first_cut or rss_mb
        self.rss_peak = max(self.rss_peak, rss_mb)
        counters = self.own = self.counters()
        stats = PartitionStats(
            run_id=self.run_id,
            counters={name: self.before.counter(name) + n for name, n in counters.items()},
            run_requests=self.run_requests_before() + counters["requests_made"],
            budget_exhausted=budget_exhausted,
            batches_running=batches_running,
            systemic_failure=systemic_failure,
            replayed=self.replayed,
            resumed=self.resumed is not None,
            finished=final,
            in_flight=in_flight,
            rss_mb_first_cut=self.rss_first_cut,
            rss_mb_peak=self.rss_peak,
            recent_calls=self.recent_calls(),
        )
        return stats.to_json()


def rss_now_mb() -> float:
    """This Python worker's resident memory now, in MiB (Linux /proc)."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
