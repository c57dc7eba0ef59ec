"""The enricher's counters since it was created: what the telemetry exports, the
partition runner writes into its manifests (the call counters) and the tests and
benchmarks read.

The HTTP enricher (``enrichers/http.py``) takes it; a user's function counts its calls
only. In memory only, never stored: what a manifest keeps of it is
:meth:`EnricherStats.call_counters`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class EnricherStats:
    """``throttled``: 429 answers; ``retryable_errors``: failures sent again, by reason in
    ``retries_by_reason``; ``cache_hits``: answers from the in-memory cache,
    ``response_cache_hits`` from the response cache; ``calls_saved_by_coalescing``:
    calls joined to an identical one in flight."""

    requests_made: int = 0
    responses_by_status: Mapping[int, int] = field(default_factory=dict)
    retryable_errors: int = 0
    throttled: int = 0
    cache_hits: int = 0
    calls_saved_by_coalescing: int = 0
    current_concurrency_limit: int = 0
    in_flight: int = 0
    concurrency_decreases: int = 0
    rate_decreases: int = 0
    batches_sent: int = 0
    hedges_sent: int = 0
    stragglers_resent: int = 0
    retries_by_reason: Mapping[str, int] = field(default_factory=dict)
    response_cache_hits: int = 0

    def call_counters(self) -> dict[str, int]:
        """The counters a manifest's stats carry (``snapshots/contracts.CALL_COUNTERS``)."""
        return {
            "requests_made": self.requests_made,
            "response_cache_hits": self.response_cache_hits,
            "coalesced_calls": self.calls_saved_by_coalescing,
            "cache_hits": self.cache_hits,
        }
