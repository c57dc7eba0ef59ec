"""Real Airflow services running the daily DAG, shared by the scheduler and browser tests:
the stack (demo API, api-server, scheduler, dag-processor), triggering a day, and an API
outage that fails a try once snapshots are committed; and a metadata database for every
Airflow test, migrated once per session."""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from demo import stack
from demo.stack import airflow, airflow_env, airflow_services, demo_api
from demo.users import Users
from spark_jobs.snapshots import NamespaceKey, SnapshotStore

from .job_support import write_input

DAG = "enrich_customers"
ROWS = 12_000
OUTAGE = {"outage_after_requests": 0, "outage_requests": 10**9}


_TEMPLATE: list[Path] = []


def init_airflow(env: dict[str, str], *more: tuple[str, ...]) -> None:
    """:func:`demo.stack.init_airflow` at the cost of a file copy: the database (migrated,
    with the pool) is a copy of one made once per session. ``airflow db migrate`` and
    ``pools set`` are two Airflow start-ups, 15 s on an idle 2-core machine and 90 s on a
    busy one, for every test that runs Airflow. ``more`` commands run as there."""
    if not _TEMPLATE:
        home = Path(tempfile.mkdtemp(prefix="airflow-db-"))
        atexit.register(shutil.rmtree, home, ignore_errors=True)
        database = f"sqlite:///{home}/airflow.db"
        template = {**env, "AIRFLOW_HOME": str(home)}
        stack.init_airflow({**template, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database})
        _TEMPLATE.append(home)
    target = Path(env["AIRFLOW_HOME"])
    database = env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert database == f"sqlite:///{target}/airflow.db", f"not a copy's place: {database}"
    target.mkdir(parents=True, exist_ok=True)
    for file in _TEMPLATE[0].glob("airflow.db*"):  # with a -wal file if one is left
        shutil.copy2(file, target / file.name)
    for command in more:
        result = airflow(env, *command)
        assert result.returncode == 0, result.stdout + result.stderr


@contextmanager
def airflow_stack(
    tmp: Path, users: Users | None = None, setup: tuple[tuple[str, ...], ...] = (), **extra: str
) -> Iterator[tuple]:
    """``(api, services, tmp)`` with the DAG parsed and unpaused; ``setup`` are further
    ``airflow`` commands run before the services start. The services' logs are printed
    when the block fails."""
    with demo_api("--latency-ms", "20") as api:
        env = airflow_env(tmp / "home", api.url, tmp / "data", tmp / "snapshots", **extra)
        init_airflow(env, *setup)
        with airflow_services(env, tmp / "home", users) as services:
            services.wait_for(
                lambda: services.request("GET", f"/api/v2/dags/{DAG}"), 120, "DAG parsed"
            )
            services.request("PATCH", f"/api/v2/dags/{DAG}", {"is_paused": False})
            try:
                yield api, services, tmp
            except BaseException:
                print(services.logs())
                raise


def trigger(services, day: str, **conf: Any) -> str:
    make_room(services)
    run = services.request(
        "POST",
        f"/api/v2/dags/{DAG}/dagRuns",
        {
            "logical_date": f"{day}T00:00:00Z",
            "conf": {"capacity": 10, "snapshot_interval": 1, **conf},
        },
    )
    return run["dag_run_id"]


def make_room(services) -> None:
    """Fail the DAG's scheduled runs, which wait for input no test writes: with catchup
    off, unpausing the DAG starts the latest interval's run, and each UTC midnight starts
    another; two of them fill ``max_active_runs=2`` and a triggered run waits behind them
    until the test times out (a suite that crossed midnight did)."""
    for state in ("queued", "running"):
        query = f"/api/v2/dags/{DAG}/dagRuns?run_type=scheduled&state={state}"
        for run in services.request("GET", query)["dag_runs"]:
            path = f"/api/v2/dags/{DAG}/dagRuns/{quote(run['dag_run_id'])}"
            services.request("PATCH", path, {"state": "failed"})


def namespace(day: str) -> NamespaceKey:
    return NamespaceKey(DAG, "enrich", f"{day}T00:00:00+00:00")


def committed(tmp: Path, day: str) -> int:
    try:
        return sum(
            p.done_rows
            for p in SnapshotStore(str(tmp / "snapshots")).namespace_progress(namespace(day))
        )
    except FileNotFoundError:
        return 0


def fail_first_try_by_outage(api, services, tmp, day: str, run_id: str) -> tuple[int, int]:
    """Break the API once snapshots exist; wait for the try to fail. Returns the successful
    calls made so far and the records committed when it failed."""
    services.wait_for(lambda: committed(tmp, day) >= ROWS // 5, 300, "snapshots", 0.3)
    api.post("/faults", OUTAGE)
    services.wait_for(
        lambda: (
            services.task_instance(DAG, run_id, "enrich")["state"] in ("up_for_retry", "failed")
        ),
        300,
        "the outage to fail the try",
    )
    return api.get("/stats")["by_status"].get("200", 0), committed(tmp, day)


def write_day(tmp: Path, day: str, rows: int = ROWS) -> None:
    write_input(tmp / "data" / "input" / day / "part.jsonl", [f"{day}-{i}" for i in range(rows)])


def summary_of(services, run_id: str) -> dict:
    entry = services.request(
        "GET", f"/api/v2/dags/{DAG}/dagRuns/{run_id}/taskInstances/enrich/xcomEntries/return_value"
    )
    value = entry["value"]
    return json.loads(value) if isinstance(value, str) else value


def assert_run_succeeds(services, run_id: str) -> None:
    services.wait_for(
        lambda: services.dag_run(DAG, run_id)["state"] in ("success", "failed"), 600, "the run"
    )
    assert services.dag_run(DAG, run_id)["state"] == "success", services.logs()
