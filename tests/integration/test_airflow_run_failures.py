"""Airflow's side of runs that fail as a whole (``airflow dags test``, Spark local[2], the
demo API on loopback): the task fails without automatic retries, and its log says why and
what clearing it will do."""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from pathlib import Path

import pytest

from demo.stack import airflow, airflow_env, demo_api
from enrichment_airflow.enrichment_hook import EnrichmentApiHook
from enrichment_airflow.job_arguments import job_arguments
from spark_jobs.defaults import DEAD_LETTER_RETRY_SUFFIX
from spark_jobs.records.job_record import JobRecord
from spark_jobs.records.last_failure import LastFailure
from spark_jobs.snapshots import NamespaceKey, SnapshotStore

from .airflow_support import init_airflow
from .job_support import read_output, write_input
from .operator_support import enrichment_operator
from .provider_account import QUOTA, ProviderAccount

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
    assert "account-level failure: the API answered 401" in log, log[-5000:]
    assert "check the API key / bearer token (from $ENRICHMENT_API_TOKEN)" in log
    assert "A retry: fix the cause (for an account-level failure the account's credit" in log
    assert set(refused) == {"401"}
    assert refused["401"] <= PARTITIONS * 5, "one try, no retries, the first 401 stops"
    assert not (data / "output" / DAY).exists(), "nothing published"


def test_a_spent_provider_account_fails_the_task_once_naming_the_providers_code(tmp_path):
    data = tmp_path / "data"
    write_input(data / "input" / DAY / "part.jsonl", [f"c{i:05d}" for i in range(2000)])
    with ProviderAccount(spent=True) as api:
        env = airflow_env(tmp_path / "home", api.url, data, tmp_path / "snapshots")
        init_airflow(env)
        conf = json.dumps({"capacity": 5})
        result = airflow(env, "dags", "test", "enrich_customers", DAY, "--conf", conf)
        calls = sum(api.calls.values())
    log = result.stdout + result.stderr
    assert f"the API answered 429 insufficient_quota: {QUOTA}" in log, log[-5000:]
    assert calls <= PARTITIONS * 5, "one try, no retries, the first answer stops"
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


def test_the_retry_dead_letters_param_enriches_only_them_and_publishes_once(tmp_path):
    """The day's first run leaves the records a broken API refused as dead letters; after
    the API is fixed, a run with the ``retry_dead_letters`` param calls for exactly those
    and publishes, in one step, an output with every record once and no dead letter."""
    data, out = tmp_path / "data", tmp_path / "data" / "output" / DAY
    ids = [f"c{i:05d}" for i in range(600)]
    write_input(data / "input" / DAY / "part.jsonl", ids)
    with demo_api("--bad-request-rate", "0.04") as api:  # 400 on every call of 4 %
        env = airflow_env(tmp_path / "home", api.url, data, tmp_path / "snapshots")
        init_airflow(env)
        first = airflow(env, "dags", "test", "enrich_customers", DAY)
        assert first.returncode == 0, (first.stdout + first.stderr)[-5000:]
        _, dead, base = read_output(out)
        assert dead and all("HTTP 400" in r["error"] for r in dead), dead[:3]
        calls = api.calls_per_key()

        api.post("/faults", {"bad_request_rate": 0.0})  # the API is fixed
        conf = json.dumps({"retry_dead_letters": "all"})
        with OutputWatcher(out, ids) as seen:
            retry = airflow(env, "dags", "test", "enrich_customers", DAY, "--conf", conf)
        assert retry.returncode == 0, (retry.stdout + retry.stderr)[-5000:]
        retried = api.calls_per_key() - calls
    assert retried == Counter(r["id"] for r in dead), "one call for each dead letter only"
    rows, dead_after, summary = read_output(out)
    assert dead_after == [] and summary["dead_letters"] == 0
    assert Counter(r["id"] for r in rows) == Counter(ids), "every record exactly once"
    assert all(r["name"] and r["city"] for r in rows)
    assert summary["dead_letter_retry"]["retried"] == len(dead)
    assert summary["dead_letter_retry"]["base_run_id"] == base["run_id"]
    assert seen == {base["run_id"], summary["run_id"]}, "readers saw the old or the new"
    assert sorted(p.name for p in out.parent.iterdir()) == [DAY], "nothing staged is left"


class OutputWatcher(threading.Thread):
    """Reads the output over and over while a run may publish it, as a downstream reader
    would, and asserts that every read that saw one directory throughout (same inode
    before and after) found a whole result: every record once and a summary that agrees.
    The set of run ids seen is what ``with`` yields (complete once the block exits)."""

    def __init__(self, out: Path, ids: list[str]) -> None:
        super().__init__(daemon=True)
        self.out, self.ids, self.seen = out, Counter(ids), set[str]()
        self.stopped, self.failure = threading.Event(), None

    def __enter__(self) -> set[str]:
        self.start()
        return self.seen

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.join(30)
        self.read()  # the result the run left
        if self.failure:
            raise self.failure

    def run(self) -> None:
        while not self.stopped.wait(0.05):
            try:
                self.read()
            except AssertionError as failure:
                self.failure = failure
                return

    def read(self) -> None:
        try:
            before = os.stat(self.out).st_ino
            rows, dead, summary = read_output(self.out)
            if os.stat(self.out).st_ino != before:
                return  # published while this read ran: another directory
        except (OSError, ValueError):
            return  # for an instant there is no output, or it moved away mid-read
        got = Counter(r["id"] for r in [*rows, *dead])
        assert got == self.ids, f"a mixed or partial result: {got - self.ids}, {self.ids - got}"
        assert summary["dead_letters"] == len(dead), summary
        self.seen.add(summary["run_id"])


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
    failure = LastFailure("run-1", "partition 0: systemic failure.", "fix it, then clear", 6)
    SnapshotStore(str(tmp_path)).write_job_record(key, JobRecord("f", last_failure=failure))
    hook = EnrichmentApiHook(snapshot_root=str(tmp_path))
    hook.fail_for_a_failed_run(key, "run-0")  # another run's failure: not this task's
    with pytest.raises(AirflowFailException, match=r"systemic failure\. A retry: fix it, then"):
        hook.fail_for_a_failed_run(key, "run-1")
    retry_key = NamespaceKey("d", f"enrich{DEAD_LETTER_RETRY_SUFFIX}", "day")
    ceiling = LastFailure("run-2", "dead-letter ceiling crossed.", "clear")
    SnapshotStore(str(tmp_path)).write_job_record(retry_key, JobRecord(last_failure=ceiling))
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
