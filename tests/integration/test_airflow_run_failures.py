"""Airflow's side of runs that fail as a whole (``airflow dags test``, Spark local[2], the
demo API on loopback): the task fails without automatic retries, and its log says why and
what clearing it will do."""

from __future__ import annotations

import json

import pytest

from demo.stack import airflow, airflow_env, demo_api, init_airflow
from plugins.enrichment_hook import EnrichmentApiHook
from plugins.job_arguments import job_arguments
from spark_jobs.defaults import AUTH_FAILURE_THRESHOLD, DEAD_LETTER_RETRY_SUFFIX
from spark_jobs.snapshots import NamespaceKey, SnapshotStore

from .job_support import write_input
from .operator_support import enrichment_operator

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]

DAY = "2024-01-01"
PARTITIONS = 4  # the DAG's


def test_a_wrong_key_in_the_connection_fails_the_task_once_saying_why(tmp_path):
    data = tmp_path / "data"
    write_input(data / "input" / DAY / "part.jsonl", [f"c{i:05d}" for i in range(2000)])
    with demo_api("--token-env", "DEMO_API_TOKEN", env={"DEMO_API_TOKEN": "the-right-one"}) as api:
        # The connection's password (airflow_env's default token) is not the API's key.
        env = airflow_env(tmp_path / "home", api.url, data, tmp_path / "snapshots")
        init_airflow(env)
        conf = json.dumps({"capacity": 5})
        result = airflow(env, "dags", "test", "enrich_customers", DAY, "--conf", conf)
        refused = api.get("/stats")["by_status"]
    log = result.stdout + result.stderr
    assert "systemic failure" in log and "ClientStatusError HTTP 401" in log, log[-5000:]
    assert "check the API key / bearer token (from $ENRICHMENT_API_TOKEN)" in log
    assert "A retry: fix the cause (for 401/403 the connection's key or token), then clear" in log
    assert set(refused) == {"401"}
    assert refused["401"] <= PARTITIONS * (AUTH_FAILURE_THRESHOLD + 5), "one try, no retries"
    assert not (data / "output" / DAY).exists(), "nothing published"


def test_a_crossed_dead_letter_ceiling_fails_the_task_once_saying_why(tmp_path):
    data = tmp_path / "data"
    ids = [f"c{i:05d}" for i in range(600)]
    write_input(data / "input" / DAY / "part.jsonl", ids)
    with demo_api("--bad-request-rate", "0.05") as api:
        env = airflow_env(tmp_path / "home", api.url, data, tmp_path / "snapshots")
        init_airflow(env)
        conf = json.dumps({"max_dead_letters": "1%"})
        result = airflow(env, "dags", "test", "enrich_customers", DAY, "--conf", conf)
        calls = api.get("/stats")["total"]
    log = result.stdout + result.stderr
    assert "dead-letter ceiling crossed:" in log, log[-5000:]
    assert "more than --max-dead-letters 1% (6)" in log
    assert "A retry: clearing this task replays the same result without calls" in log
    assert calls == len(ids), "each record called once: any retry replays the snapshots"
    assert not (data / "output" / DAY / "_SUMMARY.json").exists(), "nothing published"


def job_flags(monkeypatch, tmp_path, **params) -> list[str]:
    monkeypatch.setenv(
        "AIRFLOW_CONN_ENRICHMENT_API", json.dumps({"conn_type": "enrichment_api", "host": "api"})
    )
    operator = enrichment_operator(**params)
    api = EnrichmentApiHook(snapshot_root=str(tmp_path))
    return job_arguments(operator, api, NamespaceKey("d", "enrich", "day"), "run-1", [])


def test_the_operator_passes_the_ceiling_and_the_retry_only_when_set(monkeypatch, tmp_path):
    flags = job_flags(
        monkeypatch, tmp_path, max_dead_letters="2%", retry_dead_letters="ServerError"
    )
    assert flags[flags.index("--max-dead-letters") + 1] == "2%"
    assert flags[flags.index("--retry-dead-letters") + 1] == "ServerError"
    unset = job_flags(monkeypatch, tmp_path, max_dead_letters="None", retry_dead_letters="")
    assert "--max-dead-letters" not in unset and "--retry-dead-letters" not in unset


def test_the_hook_fails_the_task_with_the_job_s_reason_for_its_own_run_only(tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    key = NamespaceKey("d", "enrich", "day")
    failure = {"run_id": "run-1", "exit_status": 6, "reason": "partition 0: systemic failure."}
    SnapshotStore(str(tmp_path)).write_job_record(
        key, {"fingerprint": "f", "last_failure": {**failure, "retry": "fix it, then clear"}}
    )
    hook = EnrichmentApiHook(snapshot_root=str(tmp_path))
    hook.fail_for_a_failed_run(key, "run-0")  # another run's failure: not this task's
    with pytest.raises(AirflowFailException, match=r"systemic failure\. A retry: fix it, then"):
        hook.fail_for_a_failed_run(key, "run-1")
    retry_key = NamespaceKey("d", f"enrich{DEAD_LETTER_RETRY_SUFFIX}", "day")
    ceiling = {"run_id": "run-2", "reason": "dead-letter ceiling crossed.", "retry": "clear"}
    SnapshotStore(str(tmp_path)).write_job_record(retry_key, {"last_failure": ceiling})
    with pytest.raises(AirflowFailException, match=r"ceiling crossed\. A retry: clear"):
        hook.fail_for_a_failed_run(key, "run-2")  # a --retry-dead-letters run's failure


@pytest.mark.parametrize(
    ("param", "value"), [("max_dead_letters", "ten"), ("retry_dead_letters", "Server Error!")]
)
def test_dag_params_refuse_a_malformed_ceiling_or_class_list(param, value):
    from airflow.sdk.exceptions import ParamValidationError

    from dags.enrich_customers import dag

    with pytest.raises(ParamValidationError):
        dag.params.get_param(param).resolve(value)
    assert dag.params.get_param(param).resolve(None) is None
