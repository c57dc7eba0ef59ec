"""The job summary: what a run did (``_SUMMARY.json``, the completion record's ``summary``,
the Airflow task's XCom, the Asset event's extra).

The driver writes it (``driver/summary.py`` builds it from the run's counts); the hook,
the progress line, the snapshot page, the DAG, lineage and metrics read it. A frozen
dataclass with ``to_json`` (the stored form, keys and meaning as they always were) and
``from_json``, so a reader asks ``summary.records_in`` instead of re-parsing a dict by
string key, and each message about it is built here once.

A stored summary is hostile input, so ``from_json`` checks every value
(``values.py``) and raises ``ValueError`` naming the field. A missing field takes the
value older versions meant by leaving it out (a count of 0, False, None): documents
written before a field existed still read. An unknown field is kept in ``extra`` and
written again, so a summary passed on (the XCom) loses nothing; a newer version may add
some.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .accounting import Accounting
from .cost import CostReport
from .values import format_count, is_count, is_flag, is_number, is_optional_text, is_text


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


#: Why a run stopped for a later one (``BudgetStop.reason``), each the summary's flag.
BUDGET_SPENT, BATCHES_RUNNING = "budget_exhausted", "batches_running"


@dataclass(frozen=True)
class BudgetStop:
    """Where a run that stopped for a later one left off: on its budget (``--max-requests``,
    ``--max-cost``), or detached from provider batches still running
    (``--detach-batches``). Its summary counts what the snapshots hold, and the next run
    resumes."""

    records_done: int
    records_left: int
    partitions_stopped: tuple[int, ...]
    reason: str = BUDGET_SPENT
    """:data:`BUDGET_SPENT` or :data:`BATCHES_RUNNING`."""

    @property
    def batches_running(self) -> bool:
        return self.reason == BATCHES_RUNNING

    def describe(self, records_in: int, what: str = "request") -> str:
        """``request budget spent: 100 of 300 records done, 200 left``: the one wording,
        to which the job and the Airflow task each add what to do next."""
        if self.batches_running:
            return (
                f"provider batches still running: {self.records_done} of {records_in} "
                f"records done, {self.records_left} wait for their batches"
            )
        return (
            f"{what} budget spent: {self.records_done} of {records_in} records done, "
            f"{self.records_left} left"
        )


#: What a summary counts.
_COUNTS = ("partitions", "records_in", "enriched", "dead_letters", "requests_made")
#: What each of its other fields must be (``cost`` and ``accounting`` parse as theirs).
_SUMMARY_CHECKS: dict[str, Callable[[Any], bool]] = {
    "replayed_from_snapshot": is_count,
    "epochs": is_count,
    "run_id": is_text,
    "output": is_text,
    "resumed": is_flag,
    "budget_exhausted": is_flag,
    "batches_running": is_flag,
    "duration_s": is_number,
    "python_worker_peak_rss_mb": is_number,
    "watermark": lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)),
    "failed": is_optional_text,
    "records_done": is_count,
    "records_left": is_count,
    "partitions_stopped": lambda v: isinstance(v, list) and all(map(is_count, v)),
    "lineage_parent": lambda v: isinstance(v, dict),
    "dead_letter_retry": lambda v: isinstance(v, dict),
    "result": is_optional_text,
}
_BUDGET = (BUDGET_SPENT, BATCHES_RUNNING, "records_done", "records_left", "partitions_stopped")


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
    accounting: Accounting | None = None
    resumed: bool = False
    epochs: int = 0
    duration_s: float = 0.0
    watermark: int | None = None
    partitions: int = 0
    python_worker_peak_rss_mb: float = 0.0
    output: str = ""
    cost: CostReport = field(default_factory=CostReport)
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
        return self.cost.estimated_cost

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
        document: dict[str, Any] = {name: _plain(getattr(self, name)) for name in _WRITTEN}
        if self.accounting is None:  # as written before the summary had one
            document["accounting"] = {}
        for name in ("lineage_parent", "dead_letter_retry", "failed"):
            if getattr(self, name) is not None:
                document[name] = _plain(getattr(self, name))
        if self.table is not None:
            document["table"] = self.table.to_json()
        if self.budget is not None:
            document[self.budget.reason] = True
            document["records_done"] = self.budget.records_done
            document["records_left"] = self.budget.records_left
            document["partitions_stopped"] = list(self.budget.partitions_stopped)
        return {**document, **self.extra}

    @classmethod
    def from_json(cls, document: Any, what: str = "summary") -> JobSummary:
        """A stored summary; ValueError naming the first field that is missing or of the
        wrong type (``what`` names the document in the message)."""
        if not isinstance(document, dict):
            raise ValueError(f"{what} is not an object")
        for name in ("records_in", "enriched", "dead_letters"):
            if name not in document:
                raise ValueError(f"{what}.{name} is missing")
        for name in _COUNTS:
            if name in document and not is_count(document[name]):
                raise ValueError(f"{what}.{name} is {document[name]!r:.40}, not a count")
        for name, valid in _SUMMARY_CHECKS.items():
            if name in document and not valid(document[name]):
                raise ValueError(f"{what}.{name}: unexpected value {document[name]!r:.40}")
        known = {f.name for f in fields(cls)} - {"budget", "extra"}
        values = {name: document[name] for name in known if name in document}
        if "table" in document:
            values["table"] = TablePublish.from_json(document["table"], f"{what}.table")
        for name in ("duration_s", "python_worker_peak_rss_mb"):
            values[name] = float(values.get(name, 0.0))
        values["cost"] = CostReport.from_json(document.get("cost", {}), f"{what}.cost")
        accounting = document.get("accounting") or None  # {}: written before it existed
        values["accounting"] = (
            None if accounting is None else Accounting.from_json(accounting, f"{what}.accounting")
        )
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
    if isinstance(value, Accounting | CostReport):
        return value.to_json()
    return dict(value) if isinstance(value, Mapping) else value


def _budget_of(document: Mapping[str, Any]) -> BudgetStop | None:
    reason = next((r for r in (BUDGET_SPENT, BATCHES_RUNNING) if document.get(r)), None)
    if reason is None:
        return None
    return BudgetStop(
        records_done=document.get("records_done", 0),
        records_left=document.get("records_left", 0),
        partitions_stopped=tuple(document.get("partitions_stopped", ())),
        reason=reason,
    )
