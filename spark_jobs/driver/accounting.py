"""What the summary's call counts are worth: exact, or counted up to each attempt's last cut.

Counts of records (``records_in``, ``enriched``, ``dead_letters``, ``replayed_from_snapshot``)
come from the output and the manifests and are exact. Calls are counted where they are
paid, by each attempt in its own record (``snapshots/attempt_counts.py``), which a cut
rewrites; an attempt cut short (killed, lost, fenced off, failed) made calls after its last
record that no file holds. The summary then says so instead of passing a lower bound off as
the bill: ``accounting.calls`` is ``"exact"`` or ``"lower_bound"``, and a lower bound is
short by at most one ``--snapshot-interval`` of calls for each attempt cut short.

Standard library only: the Airflow side reads the same record from the summary.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from spark_jobs.snapshots.contracts import CALL_COUNTERS, TOKEN_COUNTERS

Exactness = Literal["exact", "lower_bound"]


class AttemptRecord(Protocol):
    """What is read of an attempt's record (``snapshots.AttemptCounts``)."""

    @property
    def partition(self) -> int: ...
    @property
    def counters(self) -> Mapping[str, int]: ...
    @property
    def final(self) -> bool: ...


@dataclass(frozen=True)
class CallAccounting:
    """The call counters over all attempts, and whether they are exact.

    ``attempts``: attempt records found; ``attempts_cut_short``: those that ended after
    their last record, and ``unreadable_records``: records that could not be read (both
    make ``calls`` a lower bound); ``unrecorded_partitions``: partitions whose manifests
    count more calls than their attempt records (attempts written before records were
    kept: the manifests' figure is used, a lower bound too).
    """

    totals: Mapping[str, int] = field(default_factory=dict)
    attempts: int = 0
    attempts_cut_short: int = 0
    unreadable_records: int = 0
    unrecorded_partitions: int = 0

    @property
    def calls(self) -> Exactness:
        missing = self.attempts_cut_short + self.unreadable_records + self.unrecorded_partitions
        return "lower_bound" if missing else "exact"

    def to_json(self) -> dict[str, Any]:
        """The summary's ``accounting`` section (the totals go in its own fields)."""
        return {
            "calls": self.calls,
            "attempts": self.attempts,
            "attempts_cut_short": self.attempts_cut_short,
            "unreadable_records": self.unreadable_records,
            "unrecorded_partitions": self.unrecorded_partitions,
        }


def account_calls(
    chains: Mapping[int, Mapping[str, Any]],
    records: Iterable[AttemptRecord],
    unreadable: int = 0,
) -> CallAccounting:
    """Totals of :data:`CALL_COUNTERS` over the attempt ``records``, per partition never
    below what its best manifest's ``chains`` stats count (a subset of the same calls)."""
    by_partition: dict[int, list[AttemptRecord]] = defaultdict(list)
    all_records = list(records)
    for record in all_records:
        by_partition[record.partition].append(record)
    totals = dict.fromkeys(CALL_COUNTERS + TOKEN_COUNTERS, 0)
    unrecorded = 0
    for partition in set(chains) | set(by_partition):
        chain, own = chains.get(partition, {}), by_partition.get(partition, [])
        short = False
        for name in totals:
            recorded = sum(r.counters.get(name, 0) for r in own)
            counted = int(chain.get(name, 0))
            totals[name] += max(recorded, counted)
            short = short or counted > recorded
        unrecorded += short
    return CallAccounting(
        totals=totals,
        attempts=len(all_records),
        attempts_cut_short=sum(1 for r in all_records if not r.final),
        unreadable_records=unreadable,
        unrecorded_partitions=unrecorded,
    )
