"""The deferred Airflow operator's end (``execute_complete``), without Spark: the event
the trigger fired, the snapshot store and ``_SUMMARY.json`` the job left. A finished
driver returns the summary and fills the Asset events as the blocking path does; a
failed one fails the try saying what the next try will do. (The whole deferred run, on a
real cluster, is in test_airflow_cluster_mode.py.)"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from airflow.sdk import Asset
from airflow.sdk.exceptions import AirflowException

from spark_jobs.records.summary import JobSummary

from .operator_support import enrichment_operator

pytestmark = pytest.mark.airflow

ENRICHED = Asset("enrichment://customers/enriched")
# A summary as the job publishes it: every field of its contract written.
SUMMARY = JobSummary.from_json(
    {"records_in": 3, "enriched": 3, "dead_letters": 0, "resumed": True, "run_id": "r"}
).to_json()

# The event ClusterRunTrigger fires for a finished driver: all execute_complete reads.
FINISHED = {
    "status": "success",
    "driver_id": "driver-1",
    "run_id": "r",
    "driver_state": "FINISHED",
    "message": "finished",
}


def context() -> dict:
    return {
        "ti": SimpleNamespace(dag_id="d", task_id="enrich", map_index=-1, try_number=1),
        "data_interval_start": datetime(2024, 1, 1, tzinfo=UTC),
        "logical_date": datetime(2024, 1, 1, tzinfo=UTC),
        "outlet_events": {ENRICHED: SimpleNamespace(extra={})},
    }


@pytest.fixture
def operator(tmp_path, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_ENRICHMENT_API", json.dumps({"conn_type": "http", "host": "api"})
    )
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "_SUMMARY.json").write_text(json.dumps(SUMMARY))
    return enrichment_operator(
        output_path=str(tmp_path / "out"),
        snapshot_root=str(tmp_path / "snapshots"),
        deferrable=True,
        outlets=[ENRICHED],
    )


def test_airflow_deferred_run_that_finished_returns_the_summary_and_the_asset_event(operator):
    ran = context()
    assert operator.execute_complete(ran, FINISHED) == SUMMARY
    assert ran["outlet_events"][ENRICHED].extra["records_in"] == 3
    assert ran["outlet_events"][ENRICHED].extra["resumed"] is True


def test_airflow_deferred_run_resumes_from_the_event_alone(operator):
    """As ``airflow dags test`` resumes it: next_kwargs ``{"event": ...}``, without the
    kwargs given to ``defer`` (a real triggerer adds the event to them)."""
    assert operator.resume_execution("execute_complete", {"event": FINISHED}, context()) == SUMMARY


def test_airflow_deferred_run_whose_driver_failed_fails_saying_what_the_next_try_does(operator):
    event = {"status": "failed", "driver_id": "driver-1", "run_id": "r", "driver_state": "KILLED"}
    with pytest.raises(AirflowException) as failed:
        operator.execute_complete(context(), event | {"message": "driver driver-1 ended KILLED"})
    assert "the next try starts fresh: no snapshot was committed" in str(failed.value)
    assert "driver driver-1 ended KILLED" in str(failed.value)


def test_airflow_run_into_a_delta_table_names_the_table_on_its_asset_event(tmp_path, monkeypatch):
    """The summary of a table output sits in the interval's partition folder (another
    interval publishing into the same table at once has its own); the Asset event names
    the table and the version the run committed."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_ENRICHMENT_API", json.dumps({"conn_type": "http", "host": "api"})
    )
    table = tmp_path / "customers"
    published = {
        "format": "delta",
        "identity": "d/enrich/2024-01-01T00:00:00+00:00@1",
        "data": {"uri": str(table), "version": 4, "committed": True},
    }
    folder = table / "interval_start=2024-01-01T00%3A00%3A00%2B00%3A00"
    folder.mkdir(parents=True)
    (folder / "_SUMMARY.json").write_text(json.dumps({**SUMMARY, "table": published}))
    (table / "_SUMMARY.json").write_text(json.dumps({**SUMMARY, "records_in": 99}))
    operator = enrichment_operator(
        output_path=str(table),
        output_format="delta",
        snapshot_root=str(tmp_path / "snapshots"),
        deferrable=True,
        outlets=[ENRICHED],
    )
    ran = context()
    assert operator.execute_complete(ran, FINISHED)["records_in"] == 3
    assert ran["outlet_events"][ENRICHED].extra["table"] == published
