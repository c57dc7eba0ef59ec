"""What the summary's call counts are worth: exact, or counted up to each attempt's last cut.

Counts of records (``records_in``, ``enriched``, ``dead_letters``, ``replayed_from_snapshot``)
come from the output and the manifests and are exact. Calls are counted where they are
paid, by each attempt in its own record (``snapshots/attempt_counts.py``), which a cut
rewrites; an attempt cut short (killed, lost, fenced off, failed) made calls after its last
record that no file holds. The summary then says so instead of passing a lower bound off as
the bill: ``accounting.calls`` is ``"exact"`` or ``"lower_bound"``, and a lower bound is
short by at most one ``--snapshot-interval`` of calls for each attempt cut short (the
record, :class:`~spark_jobs.records.accounting.Accounting`, is the summary's readers' too).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from spark_jobs.records.accounting import Accounting
from spark_jobs.snapshots.contracts import CALL_COUNTERS, TOKEN_COUNTERS


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
    """The call counters over all attempts (``totals``, by the names of
    :data:`CALL_COUNTERS` and :data:`TOKEN_COUNTERS`), and whether they are exact
    (``record``, the summary's ``accounting``)."""

    totals: Mapping[str, int] = field(default_factory=dict)
    record: Accounting = field(default_factory=Accounting)


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
    exactness = Accounting(
        attempts=len(all_records),
        attempts_cut_short=sum(1 for r in all_records if not r.final),
        unreadable_records=unreadable,
        unrecorded_partitions=unrecorded,
    )
    return CallAccounting(totals, exactness)
