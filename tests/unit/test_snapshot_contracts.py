"""The typed records between layers (``records/summary.py``, ``snapshots/contracts.py``):
round trips, hostile documents, and the on-disk forms written before the records were typed.

``data/written_by_0fa1343/`` was written by the code of commit 0fa1343 (stats and summary
as plain dicts): a partition runner's namespace (a commit, its segments, the attempt
record, ``progress.json``) and the ``_SUMMARY.json`` its publish wrote.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.records.cost import CostReport
from spark_jobs.records.summary import BudgetStop, JobSummary, TablePublish, TableVersion
from spark_jobs.records.values import format_count
from spark_jobs.snapshots import NamespaceKey, SnapshotStore
from spark_jobs.snapshots.contracts import PartitionStats
from spark_jobs.snapshots.resume import read_progress

OLD = Path(__file__).parent / "data" / "written_by_0fa1343"
KEY = NamespaceKey("d", "t", "i")

STATS: dict[str, Any] = {
    "rss_mb_first_cut": 120.5,
    "rss_mb_peak": 143.8,
    "requests_made": 40,
    "response_cache_hits": 3,
    "coalesced_calls": 2,
    "cache_hits": 1,
    "prompt_tokens": 900,
    "completion_tokens": 80,
    "run_id": "r1",
    "run_requests": 40,
    "budget_exhausted": False,
    "systemic_failure": None,
    "replayed": 5,
    "resumed": True,
    "finished": False,
    "in_flight": 4,
}
SUMMARY: dict[str, Any] = {
    "run_id": "r1",
    "records_in": 300,
    "enriched": 90,
    "dead_letters": 10,
    "replayed_from_snapshot": 0,
    "requests_made": 100,
    "accounting": {
        "calls": "exact",
        "attempts": 2,
        "attempts_cut_short": 0,
        "unreadable_records": 0,
        "unrecorded_partitions": 0,
    },
    "resumed": False,
    "epochs": 3,
    "duration_s": 1.25,
    "watermark": None,
    "partitions": 4,
    "python_worker_peak_rss_mb": 143.8,
    "output": "s3a://bucket/out",
    "cost": {
        "requests_made": 100,
        "response_cache_hits": 0,
        "coalesced_calls": 0,
        "calls_saved_by_resume": 0,
        "estimated_cost": 0.4,
    },
    "lineage_parent": {"run_id": "ol-1"},
    "budget_exhausted": True,
    "records_done": 100,
    "records_left": 200,
    "partitions_stopped": [1, 3],
    "result": None,
}


@pytest.fixture
def old(tmp_path: Path) -> Path:
    return Path(shutil.copytree(OLD, tmp_path / "old"))


def test_partition_stats_round_trip_in_the_runners_order() -> None:
    stats = PartitionStats.from_json(STATS)
    assert stats.requests_made == 40 and stats.counter("prompt_tokens") == 900
    assert stats.counter("not_counted") == 0 and stats.in_flight == 4 and not stats.finished
    assert list(stats.to_json().items()) == list(STATS.items())
    assert PartitionStats.from_json(stats.to_json()) == stats


def test_a_summary_round_trips_with_its_budget_stop_and_keys_it_does_not_know() -> None:
    document = {**SUMMARY, "written_by_a_newer_version": {"x": 1}}
    summary = JobSummary.from_json(document)
    assert summary.budget == BudgetStop(100, 200, (1, 3)) and summary.records_done == 100
    assert summary.extra == {"result": None, "written_by_a_newer_version": {"x": 1}}
    assert summary.estimated_cost == 0.4 and summary.result is None
    assert list(summary.to_json().items()) == list(document.items())
    assert JobSummary.from_json(summary.to_json()) == summary


def test_a_summary_of_a_run_detached_from_its_batches_says_so_and_round_trips() -> None:
    document = {k: v for k, v in SUMMARY.items() if k != "budget_exhausted"}
    document = {**document, "batches_running": True}
    summary = JobSummary.from_json(document)
    assert summary.budget == BudgetStop(100, 200, (1, 3), "batches_running")
    assert summary.budget.batches_running
    assert "wait for their batches" in summary.budget.describe(300)
    written = summary.to_json()
    assert written["batches_running"] is True and "budget_exhausted" not in written
    assert JobSummary.from_json(written) == summary
    assert not JobSummary.from_json(SUMMARY).budget.batches_running  # type: ignore[union-attr]


def test_missing_fields_mean_what_older_versions_meant_by_leaving_them_out() -> None:
    assert PartitionStats.from_json({}) == PartitionStats()
    summary = JobSummary.from_json({"records_in": 3, "enriched": 2, "dead_letters": 1})
    assert (summary.run_id, summary.budget, summary.cost, summary.watermark) == (
        "",
        None,
        CostReport(),
        None,
    )
    with pytest.raises(ValueError, match=r"^summary\.enriched is missing"):
        JobSummary.from_json({"records_in": 3, "dead_letters": 1})


def test_unknown_stats_are_ignored() -> None:
    stats = PartitionStats.from_json({**STATS, "some_later_counter": "anything"})
    assert stats == PartitionStats.from_json(STATS)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("requests_made", "40"),
        ("prompt_tokens", -1),
        ("finished", 1),
        ("rss_mb_peak", math.nan),
        ("run_id", 5),
        ("systemic_failure", ["x"]),
    ],
)
def test_stats_of_the_wrong_type_name_the_field(name: str, value: Any) -> None:
    with pytest.raises(ValueError, match=rf"^stats\.{name}: unexpected value"):
        PartitionStats.from_json({**STATS, name: value})


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("records_in", "300", r"summary\.records_in is '300', not a count"),
        ("enriched", True, r"summary\.enriched is True, not a count"),
        ("cost", {"estimated_cost": "0.4"}, r"summary\.cost\.estimated_cost is '0\.4'"),
        ("watermark", "soon", r"summary\.watermark: unexpected value 'soon'"),
        ("resumed", "no", r"summary\.resumed: unexpected value"),
        ("partitions_stopped", ["1"], r"summary\.partitions_stopped: unexpected value"),
        ("epochs", -1, r"summary\.epochs: unexpected value"),
    ],
)
def test_a_summary_field_of_the_wrong_type_is_named(name: str, value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        JobSummary.from_json({**SUMMARY, name: value})


@pytest.mark.parametrize("document", [[], "summary", None])
def test_a_summary_that_is_not_an_object_is_refused(document: Any) -> None:
    with pytest.raises(ValueError, match="summary is not an object"):
        JobSummary.from_json(document)


def test_the_stats_of_a_commit_written_before_they_were_typed_still_read(old: Path) -> None:
    store = SnapshotStore(str(old / "snapshots"))
    manifest = store.partition(KEY, 0).latest()
    assert manifest is not None
    stats = PartitionStats.from_json(manifest.stats)
    assert (stats.run_id, stats.requests_made, stats.finished) == ("r1", 40, True)
    assert stats.to_json() == manifest.stats, "written again as it was written"
    progress = read_progress(store, KEY)
    assert progress.partitions[0].partition_stats == stats
    assert progress.describe(40) == "epoch 0: 40 of 40 records committed, 0 in flight"


def test_a_summary_published_before_it_was_typed_still_reads(old: Path) -> None:
    document = json.loads((old / "output" / "_SUMMARY.json").read_text())
    summary = JobSummary.from_json(document)
    assert (summary.run_id, summary.records_in, summary.records_done) == ("r1", 40, 40)
    assert summary.budget is None and summary.result is not None
    assert summary.to_json() == document


def test_the_airflow_hook_reads_a_summary_published_before_it_was_typed(old: Path) -> None:
    from enrichment_airflow.enrichment_hook import EnrichmentApiHook

    summary = EnrichmentApiHook().read_summary(str(old / "output"))
    assert summary.enriched == 38 and summary.cost.estimated_cost == 0.4


def test_each_message_is_built_once() -> None:
    assert format_count(12_000) == "12 000" and format_count(None) == "?"
    assert format_count(1_234_567, "\u202f") == "1\u202f234\u202f567"
    summary = JobSummary(records_in=12_000, enriched=11_997, dead_letters=3)
    assert summary.describe_completed() == "completed: 12 000 of 12 000 records (3 dead letters)"
    assert summary.describe_published() == "12 000 / 12 000 done (3 dead letters), output published"
    stop = BudgetStop(100, 200, (0,))
    assert stop.describe(300) == "request budget spent: 100 of 300 records done, 200 left"
    assert stop.describe(300, "cost").startswith("cost budget spent: ")


def test_a_table_output_summary_round_trips_and_names_its_version() -> None:
    """The summary's ``table`` (the completion record's, the XCom's) is typed both ways;
    the snapshot page's line names the table and the version that holds the rows."""
    table = TablePublish(
        "delta",
        "dag/enrich/2026-12-01@2",
        TableVersion("s3://lake/customers", 7, True),
        TableVersion("s3://lake/customers_dead_letters", 3, False),
    )
    summary = JobSummary(records_in=10, enriched=9, dead_letters=1, table=table)
    assert JobSummary.from_json(summary.to_json()) == summary
    assert summary.describe_completed() == (
        "completed: 10 of 10 records (1 dead letters), in delta table s3://lake/customers version 7"
    )
    broken = {**summary.to_json(), "table": {**table.to_json(), "data": {"uri": "x"}}}
    with pytest.raises(ValueError, match=r"summary\.table\.data: expected uri, version"):
        JobSummary.from_json(broken)
