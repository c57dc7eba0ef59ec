"""A deferrable batch run on real Airflow services (api-server, scheduler with the
LocalExecutor, dag-processor, triggerer) against the demo model endpoint's batch API:
the task submits its batches, defers while the provider works (no worker slot, no job
process: checked through the scheduler's pool and task state and the process table, not
the code), and once they end runs the job again, which reads and publishes every row
exactly once."""

from __future__ import annotations

import json
import time
from pathlib import Path
from urllib.parse import quote

import psutil
import pytest

from demo.stack import airflow_env, airflow_services

from .airflow_support import init_airflow
from .test_enrich_job_model import MODEL as CLASSIFIER
from .test_enrich_job_model import model_endpoint, title

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]

DAG, TASK = "classify_batch", "classify"
RECORDS = 200
MODEL = {**CLASSIFIER, "batch_wait_s": 0.3, "batch_poll_s": 1}
DAG_FILE = """
import json
import pendulum
from airflow.sdk import DAG
from enrichment_airflow.enrichment_operator import ResumableEnrichmentOperator

with DAG("{dag}", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC")):
    ResumableEnrichmentOperator(
        task_id="{task}",
        input_path="{data}/input/",
        output_path="{data}/output/",
        key_column="id",
        url_path="/v1/chat/completions",
        method="POST",
        response_fields={{}},
        partitions=2,
        capacity=4,
        model_mode="batch",
        deferrable=True,
        job_args=["--model", json.dumps({model}), "--snapshot-interval", "1"],
    )
"""


def write_dag_and_input(tmp: Path) -> None:
    (tmp / "dags").mkdir()
    text = DAG_FILE.format(dag=DAG, task=TASK, data=tmp / "data", model=MODEL)
    (tmp / "dags" / "classify_batch.py").write_text(text)
    (tmp / "data" / "input").mkdir(parents=True)
    lines = (json.dumps({"id": f"m{i:04d}", "title": title(i)}) for i in range(RECORDS))
    (tmp / "data" / "input" / "part.jsonl").write_text("\n".join(lines) + "\n")


def job_processes(tmp: Path) -> list[psutil.Process]:
    """The enrichment job's processes of this test (its output path in their command line)."""
    mine = str(tmp / "data" / "output")
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if any(mine in part for part in process.info["cmdline"] or []):
            found.append(process)
    return found


def test_a_deferred_batch_run_holds_no_slot_while_its_batches_run_and_publishes_once(tmp_path):
    write_dag_and_input(tmp_path)
    with model_endpoint("--process-s", "40", "--day-s", "600") as (url, get):
        base = url.removesuffix("/v1")
        env = airflow_env(
            tmp_path / "home",
            base,
            tmp_path / "data",
            tmp_path / "snapshots",
            AIRFLOW__CORE__DAGS_FOLDER=str(tmp_path / "dags"),
        )
        init_airflow(env)
        with airflow_services(env, tmp_path / "home", triggerer=True) as services:
            try:
                run_id = start(services)
                wait_deferred_while_batches_run(services, run_id, tmp_path, get)
                task = services.wait_for(lambda: ended(services, run_id), 600, "task end", 2)
                assert task["state"] == "success"
                log = task_log(services, run_id)
            except BaseException:
                print(services.logs())
                raise
        stats = get("/stats")
    summary = json.loads((tmp_path / "data" / "output" / "_SUMMARY.json").read_text())
    assert summary["records_in"] == RECORDS
    assert summary["enriched"] + summary["dead_letters"] == RECORDS
    assert "batches_running" not in summary and summary["cost"]["batch_prompt_tokens"] > 0
    assert stats["batch_requests_charged"] == RECORDS and stats["custom_ids_paid_twice"] == 0
    assert stats.get("requests", 0) == 0, "no online call"
    assert task["try_number"] == 1, "deferred and resumed within one try"
    assert "deferring until they end" in log
    assert "in_progress" in log and "provider batches ended" in log, log[-3000:]


def start(services) -> str:
    services.wait_for(lambda: services.request("GET", f"/api/v2/dags/{DAG}"), 120, "DAG parsed")
    services.request("PATCH", f"/api/v2/dags/{DAG}", {"is_paused": False})
    run = services.request(
        "POST", f"/api/v2/dags/{DAG}/dagRuns", {"logical_date": "2024-01-02T00:00:00Z"}
    )
    return run["dag_run_id"]


def wait_deferred_while_batches_run(services, run_id: str, tmp: Path, get) -> None:
    """Once the task defers: the batches still run at the provider, no job process is
    left, the task holds no running slot of its pool, and the trigger is what waits."""
    services.wait_for(
        lambda: services.task_instance(DAG, run_id, TASK)["state"] == "deferred",
        300,
        "the task deferred",
        0.5,
    )
    stats = get("/stats")
    assert 0 < stats["batches_created"] and stats.get("batch_requests", 0) < RECORDS, stats
    deadline = time.monotonic() + 30  # the job's last processes exit
    while job_processes(tmp) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert job_processes(tmp) == [], "a job process is left while the task is deferred"
    pool = services.request("GET", "/api/v2/pools/default_pool")
    assert pool["running_slots"] == 0 and pool["deferred_slots"] == 1, pool
    assert services.task_instance(DAG, run_id, TASK)["state"] == "deferred"


def ended(services, run_id: str) -> dict | None:
    task = services.task_instance(DAG, run_id, TASK)
    return task if task["state"] in ("success", "failed", "upstream_failed") else None


def task_log(services, run_id: str) -> str:
    path = f"/api/v2/dags/{DAG}/dagRuns/{quote(run_id)}/taskInstances/{TASK}/logs/1"
    return json.dumps(services.request("GET", path + "?full_content=true")["content"])
