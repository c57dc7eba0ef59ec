"""Real Airflow services (api-server, scheduler with LocalExecutor, dag-processor) run
the daily DAG: an API outage fails a try after snapshots were committed, and both the
automatic retry and a "Clear" through the REST API resume; a backfill over three dates
uses three namespaces."""

from __future__ import annotations

import json
import re
from urllib.parse import quote

import pytest

from demo.stack import airflow

from .airflow_support import (
    DAG,
    ROWS,
    airflow_stack,
    assert_run_succeeds,
    fail_first_try_by_outage,
    summary_of,
    trigger,
    write_day,
)
from .job_support import write_input

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with airflow_stack(tmp_path_factory.mktemp("airflow")) as running:
        yield running


def start_day_and_break_the_api(stack, day: str) -> tuple[str, int, int]:
    """A day's input, a triggered run, and an outage that fails its first try."""
    api, services, tmp = stack
    write_day(tmp, day)
    api.post("/stats/reset")
    run_id = trigger(services, day)
    return (run_id, *fail_first_try_by_outage(api, services, tmp, day, run_id))


def assert_resumed_within_bound(api, summary, ok_calls_at_failure, committed_at_failure):
    assert summary["resumed"] is True and summary["replayed_from_snapshot"] > 0
    assert summary["records_in"] == ROWS == summary["enriched"] + summary["dead_letters"]
    assert summary["dead_letters"] == 0, "an outage must not produce dead letters"
    repeated = api.get("/stats")["by_status"]["200"] - ROWS
    assert repeated <= ok_calls_at_failure - committed_at_failure


def test_automatic_retry_after_an_outage_resumes(stack):
    api, services, _ = stack
    run_id, ok_calls, done = start_day_and_break_the_api(stack, "2024-01-02")
    api.heal()
    assert_run_succeeds(services, run_id)
    assert services.task_instance(DAG, run_id, "enrich")["try_number"] == 2
    first_try = services.request(
        "GET",
        f"/api/v2/dags/{DAG}/dagRuns/{quote(run_id)}/taskInstances/enrich/logs/1?full_content=true",
    )
    # The failed try says what the retry will do (the outage came after commits).
    assert re.search(
        r"enrich_job failed; the next try resumes from epoch \d+: [\d ]+ of 12 000",
        json.dumps(first_try["content"], ensure_ascii=False),
    ), first_try
    summary = summary_of(services, run_id)
    assert_resumed_within_bound(api, summary, ok_calls, done)
    events = services.request("GET", f"/api/v2/assets/events?source_run_id={quote(run_id)}")
    [event] = events["asset_events"]
    assert event["extra"]["records_in"] == ROWS and event["extra"]["resumed"] is True
    assert event["extra"]["watermark"] == summary["watermark"] is not None


def test_clearing_a_failed_task_through_the_rest_api_resumes(stack):
    api, services, _ = stack
    run_id, ok_calls, done = start_day_and_break_the_api(stack, "2024-01-03")
    services.request(  # an operator gives up on it, as "Mark failed" does
        "PATCH",
        f"/api/v2/dags/{DAG}/dagRuns/{run_id}/taskInstances/enrich",
        {"new_state": "failed"},
    )
    # As in the UI: Clear once the scheduler has settled the run (publish upstream_failed,
    # the run failed); clearing earlier leaves publish behind in upstream_failed.
    services.wait_for(
        lambda: (
            services.task_instance(DAG, run_id, "publish")["state"] == "upstream_failed"
            and services.dag_run(DAG, run_id)["state"] == "failed"
        ),
        300,
        "the run to settle as failed",
    )
    api.heal()
    services.request(  # what the UI's "Clear" sends
        "POST",
        f"/api/v2/dags/{DAG}/clearTaskInstances",
        {
            "dag_run_id": run_id,
            "task_ids": ["enrich"],
            "dry_run": False,
            "only_failed": True,
            "include_downstream": True,
        },
    )
    assert_run_succeeds(services, run_id)
    assert_resumed_within_bound(api, summary_of(services, run_id), ok_calls, done)


def test_backfill_over_three_dates_uses_three_namespaces(stack):
    _, services, tmp = stack
    days = ["2024-02-01", "2024-02-02", "2024-02-03"]
    for day in days:
        write_input(tmp / "data" / "input" / day / "part.jsonl", [f"{day}-{i}" for i in range(300)])
    result = airflow(
        services.env,
        "backfill",
        "create",
        "--dag-id",
        DAG,
        "--from-date",
        days[0],
        "--to-date",
        days[-1],
    )
    assert result.returncode == 0, result.stdout + result.stderr

    def backfill_runs():
        runs = services.request("GET", f"/api/v2/dags/{DAG}/dagRuns?run_type=backfill")["dag_runs"]
        return (
            runs
            if len(runs) == 3 and all(r["state"] in ("success", "failed") for r in runs)
            else None
        )

    runs = services.wait_for(backfill_runs, 600, "three backfill runs", 2)
    assert {r["state"] for r in runs} == {"success"}, services.logs()
    namespaces = set()
    for run in runs:
        summary = summary_of(services, run["dag_run_id"])
        assert summary["records_in"] == 300 == summary["enriched"]
        logs = list(
            (tmp / "home" / "logs").rglob(f"*run_id={run['dag_run_id']}*/task_id=enrich/*.log")
        )
        text = "".join(p.read_text() for p in logs)
        namespaces |= {
            part.split("/enrich/")[1][:10] for part in text.split() if f"{DAG}/enrich/" in part
        }
    assert namespaces == set(days)
