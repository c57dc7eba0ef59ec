"""A partition's statistics: the record a partition runner writes and the driver reads.

A partition runner writes :class:`PartitionStats` into every manifest it commits; the
driver, the progress record and the Airflow side read them back. A frozen dataclass with
``to_json`` (the stored form, keys and meaning as they always were) and ``from_json``, so
a reader asks ``stats.requests_made`` instead of re-parsing a dict by string key. The job
summary has the same shape in ``spark_jobs/records/summary.py``, the namespace's progress
record in ``progress.py``.

Stored documents are hostile input (anyone with write access to the bucket can craft one):
a crafted ``"requests_made": "x"`` once reached the page as a string and raised
``TypeError`` far from the file (a 500 for the page's whole list). So ``from_json`` checks
every known counter (:func:`check_stats`, which a manifest's reader calls too) and raises
``ValueError`` naming the field. A missing field takes the value older versions meant by
leaving it out (a count of 0, False, None): stats written before a field existed still
read. An unknown field is ignored: a newer version may add some, and nothing reads them
back.

Standard library only: the Airflow plugin imports it at parse time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from spark_jobs.records.values import is_count, is_flag, is_number, is_optional_text, is_text

#: The enrichment's call counters a partition counts (``row_enrichment.py``).
CALL_COUNTERS = ("requests_made", "response_cache_hits", "coalesced_calls", "cache_hits")
#: A model endpoint's too (``model_endpoint/pacing.py``): tokens of the calls paid for.
TOKEN_COUNTERS = (
    "prompt_tokens",
    "completion_tokens",
    "batch_prompt_tokens",
    "batch_completion_tokens",
)
"""Every token paid for, and of them those paid through a batch API (at its price)."""


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
    **dict.fromkeys(CALL_COUNTERS + TOKEN_COUNTERS, is_count),
    **dict.fromkeys(("run_requests", "replayed", "in_flight"), is_count),
    **dict.fromkeys(("finished", "budget_exhausted", "batches_running", "resumed"), is_flag),
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


@dataclass(frozen=True)
class PartitionStats:
    """A manifest's ``stats``: the counters of the chain of attempts that led to its cut.

    ``counters`` are the enrichment's own (:data:`CALL_COUNTERS`, and :data:`TOKEN_COUNTERS`
    for a model endpoint), carried across attempts; ``run_requests`` are the requests of
    this run's attempts only (the budget is per run). ``systemic_failure`` is the reason
    the attempt stopped as one, None for any other cut. ``recent_calls`` are the
    attempt's answers of the last minute by outcome (``enrichers/call_outcomes.py``), as
    they stood at the cut: what the driver's progress line says the calls are getting.
    """

    run_id: str = ""
    counters: Mapping[str, int] = field(default_factory=dict)
    run_requests: int = 0
    budget_exhausted: bool = False
    batches_running: bool = False
    systemic_failure: str | None = None
    replayed: int = 0
    resumed: bool = False
    finished: bool = False
    in_flight: int = 0
    rss_mb_first_cut: float = 0.0
    rss_mb_peak: float = 0.0
    recent_calls: Mapping[str, int] = field(default_factory=dict)

    def counter(self, name: str) -> int:
        """One of the enrichment's counters; 0 when it was not counted."""
        return self.counters.get(name, 0)

    @property
    def requests_made(self) -> int:
        return self.counter("requests_made")

    def to_json(self) -> dict[str, Any]:
        """The stored form, in the order the runner always wrote it (counters flat)."""
        return {
            "rss_mb_first_cut": self.rss_mb_first_cut,
            "rss_mb_peak": self.rss_mb_peak,
            **self.counters,
            "run_id": self.run_id,
            "run_requests": self.run_requests,
            "budget_exhausted": self.budget_exhausted,
            **({"batches_running": True} if self.batches_running else {}),
            "systemic_failure": self.systemic_failure,
            "replayed": self.replayed,
            "resumed": self.resumed,
            "finished": self.finished,
            "in_flight": self.in_flight,
            **({"recent_calls": dict(self.recent_calls)} if self.recent_calls else {}),
        }

    @classmethod
    def from_json(cls, stats: Mapping[str, Any]) -> PartitionStats:
        """The stats of a stored manifest; ValueError naming a value of the wrong type."""
        if not isinstance(stats, Mapping):
            raise ValueError(f"stats: not an object but {type(stats).__name__}")
        check_stats(stats)
        known = {f.name for f in fields(cls)} - {"counters"}
        values = {name: stats[name] for name in known if name in stats}
        for name in ("rss_mb_first_cut", "rss_mb_peak"):
            values[name] = float(values.get(name, 0.0))
        names = CALL_COUNTERS + TOKEN_COUNTERS
        return cls(counters={n: stats[n] for n in names if n in stats}, **values)
