"""The summary's cost report: what a run paid for and the calls it did not have to make.

The driver counts it (``driver/summary.py``) from its partitions and the attempts' call
counters and adds the tokens a model enrichment paid for; the snapshot page counts the
same report live from the progress record (:meth:`CostReport.count`), and the Airflow
task sends its ``estimated_cost`` as a metric. A stored one is hostile input:
:meth:`CostReport.from_json` raises ``ValueError`` naming a value that is not a number.
A count missing from an older summary is 0; an unknown number is kept (``extra``) and
written again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Protocol

from .values import is_count, is_number

_COUNTS = ("requests_made", "response_cache_hits", "coalesced_calls", "calls_saved_by_resume")
_TOKENS = ("prompt_tokens", "completion_tokens", "batch_prompt_tokens", "batch_completion_tokens")


class CallCounts(Protocol):
    """A partition's call counters, as its progress entry holds them."""

    @property
    def requests_made(self) -> int: ...
    @property
    def response_cache_hits(self) -> int: ...
    @property
    def coalesced_calls(self) -> int: ...
    @property
    def cache_hits(self) -> int: ...
    @property
    def replayed(self) -> int: ...


@dataclass(frozen=True)
class CostReport:
    """Calls made and saved (by the response cache, by sharing identical requests, by
    resuming from snapshots); priced with ``--cost-per-request``, and with the tokens
    and their cost of a model enrichment. None: not priced, or no model."""

    requests_made: int = 0
    response_cache_hits: int = 0
    coalesced_calls: int = 0
    calls_saved_by_resume: int = 0
    cost_per_request: float | None = None
    estimated_cost: float | None = None
    estimated_saving: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    batch_prompt_tokens: int | None = None  # of them, paid through a batch API
    batch_completion_tokens: int | None = None
    price_input_per_million: float | None = None
    price_output_per_million: float | None = None
    token_cost: float | None = None
    extra: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def count(
        cls,
        partitions: Sequence[CallCounts],
        cost_per_request: float | None,
        counted: Mapping[str, int] | None = None,
    ) -> CostReport:
        """The report of ``partitions``; ``counted`` holds the attempts' own call
        counters (``CallAccounting.totals``), without it (a live view) the partitions'
        are added up."""

        def total(name: str) -> int:
            if counted is not None and name in counted:
                return int(counted[name])
            return sum(int(getattr(p, name)) for p in partitions)

        report = cls(
            requests_made=total("requests_made"),
            response_cache_hits=total("response_cache_hits"),
            coalesced_calls=total("coalesced_calls") + total("cache_hits"),
            calls_saved_by_resume=total("replayed"),
        )
        return report if cost_per_request is None else report.priced(cost_per_request)

    def priced(self, cost_per_request: float) -> CostReport:
        saved = self.response_cache_hits + self.coalesced_calls + self.calls_saved_by_resume
        return replace(
            self,
            cost_per_request=cost_per_request,
            estimated_cost=round(self.requests_made * cost_per_request, 6),
            estimated_saving=round(saved * cost_per_request, 6),
        )

    def to_json(self) -> dict[str, Any]:
        """The stored form, keys in the order the driver always wrote them."""
        document = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name != "extra" and getattr(self, f.name) is not None
        }
        return {**document, **self.extra}

    @classmethod
    def from_json(cls, document: Any, what: str = "cost") -> CostReport:
        if not isinstance(document, dict):
            raise ValueError(f"{what} is not an object")
        for name, value in document.items():
            if not is_number(value):
                raise ValueError(f"{what}.{name} is {value!r:.40}, not a number")
        for name in (*_COUNTS, *_TOKENS):
            if name in document and not is_count(document[name]):
                raise ValueError(f"{what}.{name} is {document[name]!r:.40}, not a count")
        known = {f.name for f in fields(cls)} - {"extra"}
        values = {name: document[name] for name in known if name in document}
        extra = {k: v for k, v in document.items() if k not in known}
        return cls(**values, extra=extra)
