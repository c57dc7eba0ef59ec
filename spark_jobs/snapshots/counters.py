"""The counters stored documents carry, checked where they are parsed.

A manifest's ``stats`` (``partition_runner/stats.py`` writes them) are added up, compared
and shown by the driver, the Airflow task and the snapshot page. A crafted
``"requests_made": "x"`` once reached them as a string and raised ``TypeError`` far from
the file (a 500 for the page's whole list). Each known
counter is checked here instead, so a document with a bad one is corrupt where it is
read: the previous commit is used, or the namespace is shown as unreadable. Unknown keys
are left alone (a newer version may add some). What a value may be is
``spark_jobs/records/values.py``'s; the records that cross layers check their own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from spark_jobs.records.values import is_count, is_flag, is_number, is_optional_text, is_text

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
    **dict.fromkeys(("run_requests", "replayed", "in_flight"), is_count),
    **dict.fromkeys(("finished", "budget_exhausted", "resumed"), is_flag),
    **dict.fromkeys(("rss_mb_first_cut", "rss_mb_peak"), is_number),
    "run_id": is_text,
    "systemic_failure": is_optional_text,
    "recent_calls": is_outcome_counts,
}


def check_stats(stats: Mapping[str, Any]) -> None:
    """ValueError naming the first known counter of a manifest's ``stats`` that is not
    what the runner writes (a count, a flag, a finite number, a text)."""
    for name, valid in _STATS.items():
        if name in stats and not valid(stats[name]):
            raise ValueError(f"stats.{name}: unexpected value {stats[name]!r:.40}")
