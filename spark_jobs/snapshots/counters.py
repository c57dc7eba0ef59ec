"""The counters stored documents carry, checked where they are parsed.

A manifest's ``stats`` (``partition_runner/stats.py`` writes them) and a completion
record's ``summary`` are added up, compared and shown by the driver, the Airflow task and
the snapshot page. A crafted ``"requests_made": "x"`` once reached them as a string and
raised ``TypeError`` far from the file (a 500 for the page's whole list). Each known
counter is checked here instead, so a document with a bad one is corrupt where it is
read: the previous commit is used, or the namespace is shown as unreadable. Unknown keys
are left alone (a newer version may add some).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from .documents import ManifestError

_INT64 = 2**63


def is_count(value: Any) -> bool:
    """A whole number a counter can hold (not a bool, not negative, within int64)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _INT64


def is_number(value: Any) -> bool:
    """A finite non-negative number (a duration, a cost, a memory size)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value < _INT64
    )


def is_flag(value: Any) -> bool:
    return isinstance(value, bool)


def is_text(value: Any) -> bool:
    return isinstance(value, str)


def is_optional_text(value: Any) -> bool:
    return value is None or isinstance(value, str)


#: Outcomes a stored count of calls by outcome may name, and how long a name may be: above
#: what the enricher writes (``enrichers/call_outcomes.py``: 8 and "other", a status and
#: a 64-character code), so only a crafted document meets them.
MAX_OUTCOMES_STORED = 16
MAX_OUTCOME_CHARS = 80


def is_outcome_counts(value: Any) -> bool:
    """Calls by outcome (``{"429 rate_limit_exceeded": 480}``): a few short names, counts."""
    return (
        isinstance(value, dict)
        and len(value) <= MAX_OUTCOMES_STORED
        and all(
            isinstance(name, str) and len(name) <= MAX_OUTCOME_CHARS and is_count(count)
            for name, count in value.items()
        )
    )


_STATS: dict[str, Callable[[Any], bool]] = {
    **dict.fromkeys(
        ("requests_made", "response_cache_hits", "coalesced_calls", "cache_hits"), is_count
    ),
    **dict.fromkeys(("prompt_tokens", "completion_tokens"), is_count),
    **dict.fromkeys(("batch_prompt_tokens", "batch_completion_tokens"), is_count),
    **dict.fromkeys(("run_requests", "replayed", "in_flight"), is_count),
    **dict.fromkeys(("finished", "budget_exhausted", "resumed"), is_flag),
    **dict.fromkeys(("rss_mb_first_cut", "rss_mb_peak"), is_number),
    "run_id": is_text,
    "systemic_failure": is_optional_text,
    "recent_calls": is_outcome_counts,
}
#: What a completion record's summary counts (``summary.py``), and its ``cost`` values.
SUMMARY_COUNTS = ("partitions", "records_in", "enriched", "dead_letters", "requests_made")


def check_stats(stats: Mapping[str, Any]) -> None:
    """ValueError naming the first known counter of a manifest's ``stats`` that is not
    what the runner writes (a count, a flag, a finite number, a text)."""
    for name, valid in _STATS.items():
        if name in stats and not valid(stats[name]):
            raise ValueError(f"stats.{name}: unexpected value {stats[name]!r:.40}")


def check_completion(record: Any, what: str) -> dict[str, Any]:
    """``record`` when it is a completion record whose summary counts and costs are
    numbers; raises :class:`ManifestError` naming the field otherwise."""
    if not isinstance(record, dict):
        raise ManifestError(f"{what}: not a JSON object")
    summary = record.get("summary")
    if summary is not None:
        check_summary(summary, f"{what}: summary")
    return record


def check_summary(summary: Any, what: str) -> None:
    """Raises :class:`ManifestError` naming the first of a job summary's counts or costs
    that is not a number (``what`` names the document: ``completion record: summary``)."""
    if not isinstance(summary, dict):
        raise ManifestError(f"{what} is not an object")
    for name in SUMMARY_COUNTS:
        if name in summary and not is_count(summary[name]):
            raise ManifestError(f"{what}.{name} is {summary[name]!r:.40}, not a count")
    cost = summary.get("cost", {})
    if not isinstance(cost, dict):
        raise ManifestError(f"{what}.cost is not an object")
    for name, value in cost.items():
        if not is_number(value):
            raise ManifestError(f"{what}.cost.{name} is {value!r:.40}, not a number")
