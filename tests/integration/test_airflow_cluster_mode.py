"""The Airflow operator in cluster deploy mode on a real standalone cluster with REST
submission (``spark.master.rest.enabled``), against the demo API on loopback.

* deferrable: ``airflow dags test`` (which runs the trigger inline, as a triggerer
  would) submits the driver, waits in ``ClusterRunTrigger`` with progress in the log, and
  ends in that same try as a blocking run does: exact output, the summary returned, the
  Asset event;
* durable (real scheduler, LocalExecutor): the task process is killed mid-run, not the
  driver; the retry re-attaches to the running driver (one driver, no call twice), or,
  with the driver killed too, submits a new one that resumes from the snapshots.
"""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

import psutil
import pytest

from demo.stack import BIN, ROOT, airflow_env, airflow_services, demo_api, free_port

from .airflow_support import (
    DAG,
    assert_run_succeeds,
    committed,
    init_airflow,
    summary_of,
    trigger,
)
from .job_support import read_output, write_input
from .spark_cluster import standalone_cluster

# A whole DAG run on a standalone cluster, twice for the retries, each wait up to 600 s: at
# load 20 (3 test workers beside other suites) a test took longer than the suite's 600 s.
pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1200)]

DAY = "2024-01-01"
TOKEN = "s3cr3t-token"  # the connection's password in airflow_env
ROWS = 1200
#: Slow enough that the driver works for tens of seconds: progress to see, a run to kill.
CONF = {"capacity": 4, "snapshot_interval": 1}


def cluster_connection(rest_port: int) -> str:
    """The Spark connection of a standalone master's REST server in cluster deploy mode."""
    return json.dumps(
        {
            "conn_type": "spark",
            "host": f"spark://127.0.0.1:{rest_port}",
            "extra": {"deploy-mode": "cluster", "rest-port": rest_port},
        }
    )


def drivers(cluster: Path) -> list[str]:
    """Every driver the cluster launched: each has its folder in a worker's work dir."""
    return sorted(p.name for p in cluster.glob("work*/driver-*"))


def timed_lines(process: subprocess.Popen) -> list[tuple[float, str]]:
    """Each output line of ``process`` with the monotonic time it arrived."""
    lines = []
    assert process.stdout is not None
    for line in process.stdout:
        lines.append((time.monotonic(), line))
    process.wait()
    return lines


def first(lines: list[tuple[float, str]], pattern: str) -> float:
    return next(at for at, line in lines if re.search(pattern, line))


def test_a_deferrable_cluster_run_waits_in_the_trigger_and_ends_as_a_blocking_one(tmp_path):
    data, cluster, rest = tmp_path / "data", tmp_path / "cluster", free_port()
    cluster.mkdir()
    ids = [f"c{i:05d}" for i in range(ROWS)]
    write_input(data / "input" / DAY / "part.jsonl", ids)
    token_env = {"ENRICHMENT_API_TOKEN": TOKEN}  # the workers' secret, as in the compose stack
    with (
        standalone_cluster(cluster, rest_port=rest, worker_env=token_env),
        demo_api(
            "--latency-ms", "100", "--token-env", "DEMO_API_TOKEN", env={"DEMO_API_TOKEN": TOKEN}
        ) as api,
    ):
        env = airflow_env(
            tmp_path / "home",
            api.url,
            data,
            tmp_path / "snapshots",
            AIRFLOW_CONN_SPARK_ENRICH=cluster_connection(rest),
            AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE="True",
        )
        init_airflow(env)
        command = [str(BIN / "airflow"), "dags", "test", "enrich_customers", DAY]
        process = subprocess.Popen(
            [*command, "--conf", json.dumps(CONF)],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        lines = timed_lines(process)
        log = "".join(line for _, line in lines)
        calls = api.calls_per_key()
    assert process.returncode == 0, log[-6000:]
    assert len(drivers(cluster)) == 1, drivers(cluster)
    assert set(calls) == set(ids) and set(calls.values()) == {1}, "each record called once"
    data_rows, dead, summary = read_output(data / "output" / DAY)
    assert sorted(r["id"] for r in data_rows) == ids and dead == []
    assert summary["records_in"] == ROWS and summary["requests_made"] == ROWS
    # The task deferred, and the wait was the trigger's: it logged the driver's state and
    # the progress record.
    assert "running trigger in line" in log, "the task never deferred"
    assert re.search(r"driver driver-[\d-]+ is RUNNING", log), log[-6000:]
    assert re.search(r"progress: [\d ]+ / 1 200 committed", log)
    assert f"published {DAY}: " in log, "the summary reached publish through XCom"
    returned = json.loads(log.split(f"published {DAY}: ", 1)[1].splitlines()[0])
    assert returned == summary
    with sqlite3.connect(tmp_path / "home" / "airflow.db") as db:
        [(extra,)] = db.execute("SELECT extra FROM asset_event").fetchall()
        tries = db.execute(
            "SELECT try_number, state FROM task_instance WHERE task_id = 'enrich'"
        ).fetchall()
    assert json.loads(extra)["records_in"] == ROWS and json.loads(extra)["resumed"] is False
    # The deferred try ended the task itself, resumed with the trigger's event: not a
    # retry that found the finished driver through the provider's durable re-attach.
    assert tries == [(1, "success")], log[-6000:]
    report_worker_time(lines)


def report_worker_time(lines: list[tuple[float, str]]) -> None:
    """The enrich task's time outside the trigger: what a worker slot holds."""
    start = first(lines, r"\[DAG TEST\] starting (task )?task_id=enrich\b")
    deferred = first(lines, r"running trigger in line")
    resumed = first(lines, r"Trigger completed")
    end = first(lines, r"end task task_id=enrich\b")
    print(
        f"\nFIGURES deferrable: worker {deferred - start + end - resumed:.1f} s, "
        f"trigger {resumed - deferred:.1f} s"
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """A REST-enabled cluster, the demo API and real Airflow services (LocalExecutor):
    a task runs in its own process there, which a test can kill."""
    tmp = tmp_path_factory.mktemp("durable")
    cluster, rest = tmp / "cluster", free_port()
    cluster.mkdir()
    with (
        standalone_cluster(cluster, rest_port=rest, worker_env={"ENRICHMENT_API_TOKEN": TOKEN}),
        # Slower: the driver outlives the retry delay (20 s) and the retry's start-up.
        demo_api(
            "--latency-ms", "400", "--token-env", "DEMO_API_TOKEN", env={"DEMO_API_TOKEN": TOKEN}
        ) as api,
    ):
        env = airflow_env(
            tmp / "home",
            api.url,
            tmp / "data",
            tmp / "snapshots",
            AIRFLOW_CONN_SPARK_ENRICH=cluster_connection(rest),
        )
        init_airflow(env)
        with airflow_services(env, tmp / "home") as services:
            services.wait_for(
                lambda: services.request("GET", f"/api/v2/dags/{DAG}"), 120, "DAG parsed"
            )
            services.request("PATCH", f"/api/v2/dags/{DAG}", {"is_paused": False})
            try:
                yield api, services, tmp, rest
            except BaseException:
                print(services.logs())
                raise


def task_process(rest: int) -> psutil.Process | None:
    """The process running the enrich task: the parent of the ``curl`` with which the
    provider polls the driver's REST status (not one left orphaned by a killed task).
    Only this cluster's master (REST port ``rest``): another test may poll its own."""
    status = f"127.0.0.1:{rest}/v1/submissions/status/driver-"
    for process in psutil.process_iter(["cmdline"]):
        if any(status in part for part in process.info["cmdline"] or []):
            try:
                parent = process.parent()
            except psutil.NoSuchProcess:
                continue
            if parent is not None and parent.pid != 1:
                return parent
    return None


def start_and_kill_the_task(stack, day: str) -> tuple[str, float]:
    """Trigger ``day``; once snapshots are committed, SIGKILL the task's process (never
    the driver). Returns the run id and the seconds that process was alive."""
    api, services, tmp, rest = stack
    write_input(tmp / "data" / "input" / day / "part.jsonl", [f"{day}-{i}" for i in range(ROWS)])
    api.post("/stats/reset")
    run_id = trigger(services, day, **CONF)
    victim = services.wait_for(lambda: task_process(rest), 600, "the task polling its driver", 0.2)
    services.wait_for(lambda: committed(tmp, day) >= ROWS // 5, 600, "snapshots", 0.3)
    alive = time.time() - victim.create_time()
    victim.send_signal(signal.SIGKILL)
    return run_id, alive


def retry_seconds(services, run_id: str) -> float:
    """How long the finished run's retry ran, as Airflow timed it. Not caught as a
    process: a retry whose driver ended meanwhile polls it once and is gone."""
    return services.task_instance(DAG, run_id, "enrich")["duration"]


def test_a_retry_whose_driver_still_runs_re_attaches_to_it(stack):
    api, services, tmp, _rest = stack
    day = "2024-01-02"
    run_id, first_alive = start_and_kill_the_task(stack, day)
    assert_run_succeeds(services, run_id)
    retry_alive = retry_seconds(services, run_id)
    assert services.task_instance(DAG, run_id, "enrich")["try_number"] == 2
    retry_log = services.request(
        "GET",
        f"/api/v2/dags/{DAG}/dagRuns/{quote(run_id)}/taskInstances/enrich/logs/2?full_content=true",
    )
    assert "re-attached to driver driver-" in json.dumps(retry_log["content"]), retry_log
    assert len(drivers(tmp / "cluster")) == 1, "the retry submitted no second driver"
    calls = api.calls_per_key()
    assert set(calls) == {f"{day}-{i}" for i in range(ROWS)} and set(calls.values()) == {1}
    data_rows, dead, summary = read_output(tmp / "data" / "output" / day)
    assert sorted(r["id"] for r in data_rows) == sorted(calls) and dead == []
    assert summary_of(services, run_id) == summary and summary["resumed"] is False
    print(
        f"\nFIGURES re-attach: task process alive {first_alive:.1f} s, retry ran "
        f"{retry_alive:.1f} s, repeated calls {sum(calls.values()) - ROWS}"
    )


def test_a_retry_whose_driver_died_too_resumes_from_the_snapshots(stack):
    api, services, tmp, rest = stack
    day = "2024-01-03"
    before = set(drivers(tmp / "cluster"))
    run_id, first_alive = start_and_kill_the_task(stack, day)
    [driver] = set(drivers(tmp / "cluster")) - before
    kill = urllib.request.Request(
        f"http://127.0.0.1:{rest}/v1/submissions/kill/{driver}", method="POST"
    )
    with urllib.request.urlopen(kill, timeout=30) as answer:
        assert json.loads(answer.read())["success"], "the master killed the driver"
    paid, done = api.settled_calls(), committed(tmp, day)
    assert_run_succeeds(services, run_id)
    retry_alive = retry_seconds(services, run_id)
    assert len(set(drivers(tmp / "cluster")) - before) == 2, "the retry submitted a new driver"
    data_rows, dead, summary = read_output(tmp / "data" / "output" / day)
    assert sorted(r["id"] for r in data_rows) == sorted(f"{day}-{i}" for i in range(ROWS))
    assert dead == [] and summary["resumed"] is True and summary["replayed_from_snapshot"] > 0
    repeated = sum(api.calls_per_key().values()) - ROWS
    assert repeated <= paid - done, "only calls not committed before the kill are repeated"
    print(
        f"\nFIGURES resume: task process alive {first_alive:.1f} s, retry ran "
        f"{retry_alive:.1f} s, "
        f"repeated calls {repeated} (bound {paid - done})"
    )
