"""The typed records between layers (``spark_jobs/records/``): each reads the form the code
before it wrote as a dict, writes it again unchanged, and names the field of a crafted one."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from spark_jobs.records.accounting import Accounting
from spark_jobs.records.completion import CompletionRecord
from spark_jobs.records.cost import CostReport
from spark_jobs.records.job_record import JobRecord
from spark_jobs.records.last_failure import LastFailure
from spark_jobs.records.summary import JobSummary
from spark_jobs.snapshots import NamespaceKey, SnapshotStore

KEY = NamespaceKey("d", "t", "i")
IDENTITY: dict[str, Any] = {
    "inputs": {"file:///in/part-0.jsonl": [120, "2026-11-24T10:00:00"]},
    "enrichment": {"partitions": 8, "url_template": "http://api/{id}"},
    "reader": {"format": "csv", "options": {"header": "true"}},
}
#: A job record as the driver wrote it before it was typed: identity, fingerprint, size,
#: and a failure as ``run_failures.py`` added it.
OLD_JOB_RECORD: dict[str, Any] = {
    **IDENTITY,
    "fingerprint": hashlib.sha256(json.dumps(IDENTITY, sort_keys=True).encode()).hexdigest(),
    "records_in": 1000,
    "last_failure": {"run_id": "r1", "exit_status": 6, "reason": "why", "retry": "clear"},
}


def test_a_job_record_written_before_it_was_typed_reads_and_keeps_its_fingerprint() -> None:
    record = JobRecord.from_json(OLD_JOB_RECORD)
    assert record.records_in == 1000 and record.last_failure == LastFailure("r1", "why", "clear", 6)
    digest = hashlib.sha256(json.dumps(record.identity(), sort_keys=True).encode()).hexdigest()
    assert digest == record.fingerprint, "a run after the upgrade resumes the one before"
    assert record.to_json() == OLD_JOB_RECORD
    assert JobRecord.from_json(record.to_json()) == record


def test_a_plain_run_s_identity_has_no_reader_and_no_retry() -> None:
    record = JobRecord("fp", inputs={}, enrichment={"partitions": 2}, records_in=3)
    assert record.identity() == {"inputs": {}, "enrichment": {"partitions": 2}}
    assert record.failed(LastFailure("r", "why", "clear")).last_failure is not None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"records_in": "1000"}, r"^job record\.records_in: unexpected value '1000'"),
        ({"inputs": ["a"]}, r"^job record\.inputs: unexpected value"),
        ({"last_failure": {"run_id": "r1", "reason": "why"}}, r"^last_failure\.retry"),
        ({"last_failure": {**OLD_JOB_RECORD["last_failure"], "exit_status": "6"}}, "exit_status"),
    ],
)
def test_a_crafted_job_record_names_its_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        JobRecord.from_json({**OLD_JOB_RECORD, **change})


def test_the_store_reads_a_crafted_job_record_as_absent_saying_why(tmp_path, caplog) -> None:
    store = SnapshotStore(str(tmp_path))
    store.write_job_record(KEY, JobRecord.from_json(OLD_JOB_RECORD))
    assert store.read_job_record(KEY) == JobRecord.from_json(OLD_JOB_RECORD)
    path = Path(store.namespace_path(KEY), "job.json")
    path.write_text(json.dumps({**OLD_JOB_RECORD, "records_in": -1}))
    with caplog.at_level(logging.WARNING):
        assert store.read_job_record(KEY) is None
    assert "job record.records_in: unexpected value -1" in caplog.text


def test_a_completion_record_keeps_the_form_the_driver_wrote() -> None:
    summary = {"records_in": 3, "enriched": 2, "dead_letters": 1, "run_id": "r1"}
    document = {"fingerprint": "fp", "run_id": "r1", "summary": summary}
    record = CompletionRecord.from_json(document)
    assert record.summary == JobSummary.from_json(summary)
    assert record.to_json() == {**document, "summary": record.summary.to_json()}
    assert CompletionRecord.from_json(record.to_json()) == record
    assert CompletionRecord.from_json({"fingerprint": "fp"}) == CompletionRecord("fp")
    with pytest.raises(ValueError, match=r"^completion record\.run_id: unexpected value 5"):
        CompletionRecord.from_json({**document, "run_id": 5})


def counts(**values: int) -> SimpleNamespace:
    names = ("requests_made", "response_cache_hits", "coalesced_calls", "cache_hits", "replayed")
    return SimpleNamespace(**{name: values.get(name, 0) for name in names})


def test_the_cost_report_counts_and_writes_as_the_driver_did() -> None:
    parts = [counts(requests_made=10, cache_hits=2, replayed=5), counts(requests_made=30)]
    assert CostReport.count(parts, None).to_json() == {
        "requests_made": 40,
        "response_cache_hits": 0,
        "coalesced_calls": 2,
        "calls_saved_by_resume": 5,
    }
    priced = CostReport.count(parts, 0.01, counted={"requests_made": 41})
    assert list(priced.to_json().items()) == [
        ("requests_made", 41),
        ("response_cache_hits", 0),
        ("coalesced_calls", 2),
        ("calls_saved_by_resume", 5),
        ("cost_per_request", 0.01),
        ("estimated_cost", 0.41),
        ("estimated_saving", 0.07),
    ]
    kept = {**priced.to_json(), "a_later_number": 1.5}
    assert CostReport.from_json(kept).to_json() == kept, "a number it does not know is kept"
    with pytest.raises(ValueError, match=r"^cost\.requests_made is 1\.5, not a count"):
        CostReport.from_json({"requests_made": 1.5})


def test_accounting_round_trips_and_a_summary_without_one_stays_without() -> None:
    written = {"calls": "lower_bound", "attempts": 3, "attempts_cut_short": 1}
    accounting = Accounting.from_json(written)
    assert accounting.calls == "lower_bound" and accounting.attempts == 3
    assert Accounting.from_json(accounting.to_json()) == accounting
    with pytest.raises(ValueError, match=r"^accounting\.calls: unexpected value 'maybe'"):
        Accounting.from_json({"calls": "maybe"})
    old = {"records_in": 1, "enriched": 1, "dead_letters": 0, "accounting": {}}
    summary = JobSummary.from_json(old)
    assert summary.accounting is None and summary.to_json()["accounting"] == {}
