"""The records one layer writes and another reads: a partition's statistics and the job summary.

A partition runner writes :class:`PartitionStats` into every manifest it commits; the
driver, the progress record and the Airflow side read them back. The driver writes a
:class:`JobSummary` as ``_SUMMARY.json``, into the completion record and as the Airflow
task's XCom; the hook, the progress line, the snapshot page, lineage and metrics read it.
Each is a frozen dataclass with ``to_json`` (the stored form, keys and meaning as they
always were) and ``from_json``, so a reader asks ``summary.records_in`` instead of
re-parsing a dict by string key, and each message about them is built here once. The
third record that crosses layers, the namespace's progress record, has the same shape in
``progress_record.py``.

Stored documents are hostile input (anyone with write access to the bucket can craft one),
so ``from_json`` checks every value with the checks of ``counters.py`` and raises
``ValueError`` naming the field. What it does with the rest, for both records:

* a missing field takes the value older versions meant by leaving it out (a count of 0,
  False, None): documents written before a field existed still read;
* an unknown field is tolerated: a newer version may add some. :class:`PartitionStats`
  ignores them (nothing reads them back); :class:`JobSummary` keeps them in ``extra`` and
  writes them again, so a summary passed on (the XCom) loses nothing.

Standard library only (and the stdlib-only ``counters.py``): the DAG and the Airflow
plugin import it at parse time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .counters import (
    check_stats,
    check_summary,
    is_count,
    is_flag,
    is_number,
    is_optional_text,
    is_text,
)

#: The enrichment's call counters a partition counts (``row_enrichment.py``).
CALL_COUNTERS = ("requests_made", "response_cache_hits", "coalesced_calls", "cache_hits")
#: A model endpoint's too (``model_endpoint/pacing.py``): tokens of the calls paid for.
TOKEN_COUNTERS = ("prompt_tokens", "completion_tokens")


def format_count(number: int | None, separator: str = " ") -> str:
    """``48 213``: thousands separated as every progress line and page writes them (the
    page passes a narrow no-break space); ``?`` for an unknown count."""
    return "?" if number is None else f"{number:,}".replace(",", separator)


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


@dataclass(frozen=True)
class TableVersion:
    """A table a run's rows went to, and the version of it that holds them."""

    uri: str
    version: int
    committed: bool
    """False when an earlier try of the same publish had committed that version."""


@dataclass(frozen=True)
class TablePublish:
    """What a table output's publish did (``driver/table_publish.py``): the summary's
    ``table``, which the Asset event, the lineage and the snapshot page name."""

    format: str
    identity: str
    """The app id and publish sequence the commits carried (``app@sequence``)."""
    data: TableVersion
    dead_letters: TableVersion | None = None
    """The dead-letter table's; None when dead letters are inline in ``data``."""

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "format": self.format,
            "identity": self.identity,
            "data": asdict(self.data),
        }
        if self.dead_letters is not None:
            document["dead_letters"] = asdict(self.dead_letters)
        return document

    @classmethod
    def from_json(cls, document: Any, what: str = "table") -> TablePublish:
        """ValueError naming the field that is missing or of the wrong type."""
        if not isinstance(document, dict):
            raise ValueError(f"{what}: expected an object")
        for name in ("format", "identity"):
            if not is_text(document.get(name)):
                raise ValueError(f"{what}.{name}: expected text")
        dead = document.get("dead_letters")
        return cls(
            document["format"],
            document["identity"],
            _table_version(document.get("data"), f"{what}.data"),
            None if dead is None else _table_version(dead, f"{what}.dead_letters"),
        )


def _table_version(document: Any, what: str) -> TableVersion:
    if not isinstance(document, dict):
        raise ValueError(f"{what}: expected an object")
    checks = {"uri": is_text, "version": is_count, "committed": is_flag}
    if not all(valid(document.get(name)) for name, valid in checks.items()):
        raise ValueError(f"{what}: expected uri, version and committed")
    return TableVersion(document["uri"], document["version"], document["committed"])


@dataclass(frozen=True)
class BudgetStop:
    """Where a run stopped by its budget (``--max-requests``, ``--max-cost``) left off:
    its summary counts what the snapshots hold, and the next run resumes."""

    records_done: int
    records_left: int
    partitions_stopped: tuple[int, ...]

    def describe(self, records_in: int, what: str = "request") -> str:
        """``request budget spent: 100 of 300 records done, 200 left``: the one wording,
        to which the job and the Airflow task each add what to do next."""
        return (
            f"{what} budget spent: {self.records_done} of {records_in} records done, "
            f"{self.records_left} left"
        )


#: What each of the summary's other fields must be, beyond ``check_summary``'s counts.
_SUMMARY_CHECKS: dict[str, Callable[[Any], bool]] = {
    "replayed_from_snapshot": is_count,
    "epochs": is_count,
    "run_id": is_text,
    "output": is_text,
    "resumed": is_flag,
    "budget_exhausted": is_flag,
    "duration_s": is_number,
    "python_worker_peak_rss_mb": is_number,
    "watermark": lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)),
    "failed": is_optional_text,
    "records_done": is_count,
    "records_left": is_count,
    "partitions_stopped": lambda v: isinstance(v, list) and all(map(is_count, v)),
    "accounting": lambda v: isinstance(v, dict),
    "lineage_parent": lambda v: isinstance(v, dict),
    "dead_letter_retry": lambda v: isinstance(v, dict),
    "result": is_optional_text,
}
_BUDGET = ("budget_exhausted", "records_done", "records_left", "partitions_stopped")


@dataclass(frozen=True)
class JobSummary:
    """What a run did: ``_SUMMARY.json``, the completion record's ``summary``, the XCom.

    ``budget`` is set when the run stopped on its budget (its output is partial, the
    snapshots are kept); ``failed`` is the reason of a result a dead-letter ceiling
    rejected; ``dead_letter_retry`` the retry's own counts in a merged summary. ``extra``
    holds keys this version does not know, and ``result`` (the run folder ``_SUMMARY.json``
    names, added when published: ``current_result.py``).
    """

    records_in: int
    enriched: int
    dead_letters: int
    run_id: str = ""
    replayed_from_snapshot: int = 0
    requests_made: int = 0
    accounting: Mapping[str, Any] = field(default_factory=dict)
    resumed: bool = False
    epochs: int = 0
    duration_s: float = 0.0
    watermark: int | None = None
    partitions: int = 0
    python_worker_peak_rss_mb: float = 0.0
    output: str = ""
    cost: Mapping[str, float] = field(default_factory=dict)
    lineage_parent: Mapping[str, Any] | None = None
    budget: BudgetStop | None = None
    dead_letter_retry: Mapping[str, Any] | None = None
    failed: str | None = None
    table: TablePublish | None = None
    """Set when the output is a table: the versions the run's rows are in."""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def records_done(self) -> int:
        """Records with an outcome in the output: enriched or dead letter."""
        return self.enriched + self.dead_letters

    @property
    def estimated_cost(self) -> float | None:
        return self.cost.get("estimated_cost")

    @property
    def result(self) -> str | None:
        value = self.extra.get("result")
        return value if isinstance(value, str) else None

    def describe_completed(self) -> str:
        """``completed: 12 000 of 12 000 records (3 dead letters)``: the snapshot page;
        a table output's adds the version holding the rows (``, in delta table
        s3://lake/customers version 7``)."""
        done, total = format_count(self.records_done), format_count(self.records_in)
        text = f"completed: {done} of {total} records ({self._dead()})"
        if self.table is None:
            return text
        data = self.table.data
        return f"{text}, in {self.table.format} table {data.uri} version {data.version}"

    def describe_published(self) -> str:
        """``12 000 / 12 000 done (3 dead letters), output published``: the Airflow
        task's progress line, in the form of its running ones."""
        done, total = format_count(self.records_done), format_count(self.records_in)
        return f"{done} / {total} done ({self._dead()}), output published"

    def _dead(self) -> str:
        return f"{format_count(self.dead_letters)} dead letters"

    def to_json(self) -> dict[str, Any]:
        """The stored form, keys in the order the driver always wrote them."""
        document: dict[str, Any] = {
            name: _plain(getattr(self, name)) for name in _WRITTEN if name != "cost"
        }
        document["cost"] = dict(self.cost)
        for name in ("lineage_parent", "dead_letter_retry", "failed"):
            if getattr(self, name) is not None:
                document[name] = _plain(getattr(self, name))
        if self.table is not None:
            document["table"] = self.table.to_json()
        if self.budget is not None:
            document["budget_exhausted"] = True
            document["records_done"] = self.budget.records_done
            document["records_left"] = self.budget.records_left
            document["partitions_stopped"] = list(self.budget.partitions_stopped)
        return {**document, **self.extra}

    @classmethod
    def from_json(cls, document: Any, what: str = "summary") -> JobSummary:
        """A stored summary; ValueError naming the first field that is missing or of the
        wrong type (``what`` names the document in the message)."""
        check_summary(document, what)
        for name in ("records_in", "enriched", "dead_letters"):
            if name not in document:
                raise ValueError(f"{what}.{name} is missing")
        for name, valid in _SUMMARY_CHECKS.items():
            if name in document and not valid(document[name]):
                raise ValueError(f"{what}.{name}: unexpected value {document[name]!r:.40}")
        known = {f.name for f in fields(cls)} - {"budget", "extra"}
        values = {name: document[name] for name in known if name in document}
        if "table" in document:
            values["table"] = TablePublish.from_json(document["table"], f"{what}.table")
        for name in ("duration_s", "python_worker_peak_rss_mb"):
            values[name] = float(values.get(name, 0.0))
        budget = _budget_of(document)
        if budget is not None:
            known |= set(_BUDGET)
        extra = {k: v for k, v in document.items() if k not in known}
        return cls(**values, budget=budget, extra=extra)


#: The fields every summary writes, in order (``cost`` last of them).
_WRITTEN = (
    "run_id",
    "records_in",
    "enriched",
    "dead_letters",
    "replayed_from_snapshot",
    "requests_made",
    "accounting",
    "resumed",
    "epochs",
    "duration_s",
    "watermark",
    "partitions",
    "python_worker_peak_rss_mb",
    "output",
    "cost",
)


def _plain(value: Any) -> Any:
    return dict(value) if isinstance(value, Mapping) else value


def _budget_of(document: Mapping[str, Any]) -> BudgetStop | None:
    if not document.get("budget_exhausted"):
        return None
    return BudgetStop(
        records_done=document.get("records_done", 0),
        records_left=document.get("records_left", 0),
        partitions_stopped=tuple(document.get("partitions_stopped", ())),
    )
