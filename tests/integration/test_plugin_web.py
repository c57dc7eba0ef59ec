"""The plugin's web part (``enrichment_airflow.web``) inside a real ``airflow api-server``.

One api-server per module, on a free loopback port, with a temporary AIRFLOW_HOME and
SQLite.  A small plugin in a temporary plugins folder registers ``enrichment_airflow.web.app`` the
way the real plugin does, so these tests do not depend on ``enrichment_airflow.plugin``.

Authentication and authorization are Airflow's own: SimpleAuthManager with users from a
passwords file, JWTs from ``POST /auth/token``.  SimpleAuthManager's roles are global
(viewer may read every DAG, only user/op/admin may edit), so "signed in but no access
to this DAG" is expressed with its multi-team mode: ``team_a_dag`` belongs (through its
bundle) to team ``team_a``; ``viewer`` is in no team and gets 403 on it, ``alice`` is a
viewer in ``team_a`` and may read it.  The edit check is shown with viewers on discard.

The snapshot root is the Airflow Variable ``enrichment_snapshot_root``, created through
the REST API once the server is up; one test deletes it to see the 503 and restores it,
which also shows that the root is read on every request.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

import httpx
import pyarrow as pa
import pytest
from fsspec.implementations.local import LocalFileSystem

from benchmarks.storage_requests import counted_requests, counting_url
from enrichment_airflow.web import URL_PREFIX, page_url
from spark_jobs.driver.progress import ProgressFolder
from spark_jobs.records.completion import CompletionRecord
from spark_jobs.records.job_record import JobRecord
from spark_jobs.records.summary import JobSummary
from spark_jobs.snapshots import Manifest, NamespaceKey, NamespaceLease, SnapshotStore
from spark_jobs.snapshots.progress import PartitionEntry, ProgressRecord

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
STARTUP_TIMEOUT = 120.0

PASSWORDS = {"admin": "admin-pw", "viewer": "viewer-pw", "alice": "alice-pw"}
USERS = "admin:admin,viewer:viewer,alice:viewer:team_a"

DAG = "enrich_customers"
TASK = "enrich"
INTERVAL = "2026-11-20T00:00:00+00:00"  # ':' and '+' in a path parameter
KEY = NamespaceKey(DAG, TASK, INTERVAL)
DISCARD_KEY = NamespaceKey(DAG, TASK, "2026-11-21T00:00:00+00:00")
VIEWER_DISCARD_KEY = NamespaceKey(DAG, "other_task", "2026-11-22T00:00:00+00:00")
BUTTON_KEY = NamespaceKey(DAG, "button_task", "2026-11-23T00:00:00+00:00")
TEAM_DAG = "team_a_dag"
TEAM_KEY = NamespaceKey(TEAM_DAG, TASK, INTERVAL)
UNKNOWN_KEY = NamespaceKey("deleted_dag", TASK, INTERVAL)  # no DAG of that id in the DB
CORRUPT_KEY = NamespaceKey(DAG, "corrupt_task", INTERVAL)  # partition 1's manifest is crafted
LIVE_KEY = NamespaceKey(DAG, "live_task", INTERVAL)  # a run holds its lease
STOPPED_KEY = NamespaceKey(DAG, "stopped_task", INTERVAL)  # no run holds it
BIG_KEY = NamespaceKey(DAG, "big_task", INTERVAL)  # a generated record of 10 000 partitions

W_FINISHED = 1_763_600_000_000
W_RUNNING = 1_763_596_800_000  # 2025-11-20T00:00:00Z: holds the job watermark back


@dataclass
class Server:
    base_url: str
    log_path: Path
    snapshot_root: Path
    tokens: dict[str, str] = field(default_factory=dict)

    def log_tail(self, lines: int = 80) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as exc:
            return f"(no server log: {exc})"
        return "\n".join(text.splitlines()[-lines:])

    def client(self, user: str | None = None, **kwargs) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.tokens[user]}"} if user else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30, **kwargs)

    def call(
        self, user: str | None, method: str, path: str, expect: int, **kwargs
    ) -> httpx.Response:
        with self.client(user) as client:
            response = client.request(method, path, **kwargs)
        assert response.status_code == expect, (
            f"{method} {path} as {user or 'anonymous'}: HTTP {response.status_code}, "
            f"expected {expect}: {response.text[:2000]}\n--- api-server log ---\n{self.log_tail()}"
        )
        return response


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _airflow_env(home: Path, dags: Path, plugins: Path, port: int) -> dict[str, str]:
    # Nothing Airflow-related leaks in from the developer's shell (e.g. a snapshot root).
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps(PASSWORDS))
    return {
        **inherited,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(plugins),
        "AIRFLOW__CORE__AUTH_MANAGER": (
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
        ),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": USERS,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__CORE__MULTI_TEAM": "True",
        "AIRFLOW__API_AUTH__JWT_SECRET": "plugin-web-tests-" + "0123456789abcdef" * 4,
        "AIRFLOW__API__SECRET_KEY": "test-api-secret-key",
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__WORKERS": "1",
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }


# The plugin module the api-server loads from the temporary plugins folder.
TEST_PLUGIN = """
from airflow.plugins_manager import AirflowPlugin

from enrichment_airflow.web import URL_PREFIX, app


class EnrichmentWebTestPlugin(AirflowPlugin):
    name = "enrichment_web_test"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "Enrichment snapshots"}]
"""

# Metadata a dag processor would have written: team_a owns team_a_dag through its bundle;
# enrich_customers lives in a bundle of no team.
TEAM_SETUP = """
from airflow.models.dag import DagModel
from airflow.models.dagbundle import DagBundleModel
from airflow.models.team import Team
from airflow.utils.session import create_session

with create_session() as session:
    team = Team(name="team_a")
    team_bundle = DagBundleModel(name="team_a_bundle")
    team_bundle.teams.append(team)
    session.add_all([team, team_bundle, DagBundleModel(name="shared_bundle")])
    session.flush()
    for dag_id, bundle in (("team_a_dag", "team_a_bundle"), ("enrich_customers", "shared_bundle")):
        session.add(
            DagModel(
                dag_id=dag_id,
                bundle_name=bundle,
                max_active_tasks=16,
                max_consecutive_failed_dag_runs=0,
                has_task_concurrency_limits=False,
            )
        )
"""


def _run(env: dict[str, str], *args: str, timeout: float = 180) -> None:
    result = subprocess.run(
        args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, f"{args} failed:\n{result.stdout}\n{result.stderr}"


def fold_progress(store: SnapshotStore, key: NamespaceKey) -> None:
    """What the job's driver does every progress interval: the namespace's progress record."""
    ProgressFolder(store, key, "run-0", partition_count=2, records_total=10).refresh()


def _write_namespace(
    store: SnapshotStore,
    key: NamespaceKey,
    budget_exhausted: bool = True,
    batches_running: bool = False,
) -> None:
    """Two partitions: 0 finished (3 of 3), 1 stopped by its request budget (2 results +
    1 dead letter of 7), and the progress record the driver folds from them."""
    store.write_job_record(key, JobRecord("f", enrichment={"partitions": 2}))
    part = store.partition(key, 0)
    ref = part.write_segment(pa.table({"id": [1, 2, 3]}), kind="results", attempt="a0")
    part.commit(
        Manifest(
            job_fingerprint="f",
            partition=0,
            epoch=2,
            input_offset=3,
            attempt="a0",
            segments=[ref],
            watermark=W_FINISHED,
            records_total=3,
            stats={"finished": True, "requests_made": 3, "response_cache_hits": 1},
        )
    )
    part = store.partition(key, 1)
    results = part.write_segment(pa.table({"id": [4, 5]}), kind="results", attempt="a1")
    dead = part.write_segment(pa.table({"id": [6]}), kind="dead_letters", attempt="a1")
    part.commit(
        Manifest(
            job_fingerprint="f",
            partition=1,
            epoch=1,
            input_offset=5,
            attempt="a1",
            pending=[{"row": 7}, {"row": 8}],
            segments=[results, dead],
            watermark=W_RUNNING,
            records_total=7,
            stats={
                "finished": False,
                "budget_exhausted": budget_exhausted,
                "batches_running": batches_running,
                "requests_made": 5,
                "replayed": 2,
                "coalesced_calls": 1,
            },
        )
    )
    fold_progress(store, key)


def done_cell(text: str) -> str:
    """A done / total cell as the page writes it (the bar follows)."""
    return f'data-label="Done / total"><span class="figures">{text}</span>'


def state_cell(state: str) -> str:
    """The end of a state cell (its tooltip before)."""
    return f">{state}</span></td>"


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the server's process group (it and its workers), SIGKILL if it lingers."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("plugin_web")
    home, dags, plugins, snapshots = (tmp / name for name in ("home", "dags", "plugins", "snaps"))
    for directory in (home, dags, plugins, snapshots):
        directory.mkdir()
    (plugins / "enrichment_web_test_plugin.py").write_text(TEST_PLUGIN)
    store = SnapshotStore(str(snapshots))
    for key in (
        KEY,
        DISCARD_KEY,
        VIEWER_DISCARD_KEY,
        BUTTON_KEY,
        TEAM_KEY,
        UNKNOWN_KEY,
        CORRUPT_KEY,
    ):
        _write_namespace(store, key)
    for key in (LIVE_KEY, STOPPED_KEY):
        _write_namespace(store, key, budget_exhausted=False)
    store.lease(LIVE_KEY, owner="run-1", ttl_s=3600).acquire(wait_s=0)
    [manifest] = Path(store.partition(CORRUPT_KEY, 1).path, "commits").glob("*.snap")
    manifest.write_bytes(b'{"format_version": 1, "epoch": NaN}')
    fold_progress(store, CORRUPT_KEY)

    port = _free_port()
    env = _airflow_env(home, dags, plugins, port)
    _run(env, str(BIN / "airflow"), "db", "migrate")
    _run(env, sys.executable, "-c", textwrap.dedent(TEAM_SETUP))

    log_path = tmp / "api-server.log"
    srv = Server(f"http://127.0.0.1:{port}", log_path, snapshots)
    failed_before = request.session.testsfailed
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(BIN / "airflow"), "api-server", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, stopped as a whole
        )
    try:
        _wait_healthy(srv, process)
        for user, password in PASSWORDS.items():
            response = httpx.post(
                f"{srv.base_url}/auth/token",
                json={"username": user, "password": password},
                timeout=30,
            )
            assert response.status_code == 201, f"token for {user}: {response.text}"
            srv.tokens[user] = response.json()["access_token"]
        srv.call(
            "admin",
            "POST",
            "/api/v2/variables",
            201,
            json={"key": "enrichment_snapshot_root", "value": str(snapshots)},
        )
        yield srv
    except BaseException:
        print(f"--- api-server log ({log_path}) ---\n{srv.log_tail(400)}", file=sys.stderr)
        raise
    finally:
        _stop(process)
        if request.session.testsfailed > failed_before:
            reporter = request.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(f"\n--- api-server log ({log_path}) ---\n{srv.log_tail(200)}")


def _wait_healthy(srv: Server, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"api-server exited with {process.returncode}:\n{srv.log_tail(400)}")
        try:
            if httpx.get(f"{srv.base_url}/api/v2/monitor/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    pytest.fail(f"api-server not healthy after {STARTUP_TIMEOUT:.0f}s:\n{srv.log_tail(400)}")


def _path(key: NamespaceKey, suffix: str = "") -> str:
    parts = "/".join(quote(p, safe="") for p in (key.dag_id, key.task_id, key.interval_start))
    return f"{URL_PREFIX}/api/namespaces/{parts}{suffix}"


def _keys(namespaces: list[dict]) -> set[tuple[str, str, str]]:
    return {(n["dag_id"], n["task_id"], n["interval_start"]) for n in namespaces}


def _as_tuple_of(namespace: dict) -> tuple[str, str, str]:
    return (namespace["dag_id"], namespace["task_id"], namespace["interval_start"])


def _as_tuple(key: NamespaceKey) -> tuple[str, str, str]:
    return (key.dag_id, key.task_id, key.interval_start)


ENDPOINTS = [
    ("GET", f"{URL_PREFIX}/"),
    ("GET", f"{URL_PREFIX}/?dag_id={DAG}"),
    ("GET", f"{URL_PREFIX}/api/namespaces"),
    ("GET", f"{URL_PREFIX}/api/namespaces?dag_id={DAG}"),
    ("GET", _path(KEY)),
    ("POST", _path(KEY, "/discard")),
]


def test_every_endpoint_needs_a_signed_in_user(server: Server) -> None:
    for method, path in ENDPOINTS:
        server.call(None, method, path, 401)
    # A token that is not Airflow's own is refused too (Airflow answers 403 for a bad JWT).
    with httpx.Client(base_url=server.base_url, headers={"Authorization": "Bearer nope"}) as c:
        assert c.get(f"{URL_PREFIX}/api/namespaces").status_code == 403
    # The page tells a browser where to sign in; the API stays JSON.
    page = server.call(None, "GET", f"{URL_PREFIX}/", 401)
    assert page.headers["content-type"].startswith("text/html")
    assert "/auth/login" in page.text
    api = server.call(None, "GET", f"{URL_PREFIX}/api/namespaces", 401)
    assert api.json() == {"detail": "Not authenticated"}
    assert KEY.dag_id in {p.name for p in server.snapshot_root.iterdir()}  # nothing discarded


def test_viewer_lists_namespaces_with_progress(server: Server) -> None:
    listed = server.call("viewer", "GET", f"{URL_PREFIX}/api/namespaces", 200).json()
    assert _as_tuple(KEY) in _keys(listed)
    assert _as_tuple(TEAM_KEY) not in _keys(listed)  # a DAG of a team viewer is not in
    ns = next(
        n for n in listed if _as_tuple(KEY) == (n["dag_id"], n["task_id"], n["interval_start"])
    )
    totals = ns["totals"]
    assert totals["partition_count"] == 2
    assert totals["partitions_reported"] == 2
    assert totals["partitions_finished"] == 1
    assert totals["records_total"] == 10
    assert totals["done_rows"] == 6
    assert totals["dead_letter_rows"] == 1
    assert totals["in_flight"] == 2
    assert totals["epoch"] == 2
    # The valve over partitions: the finished one is idle, the running one holds it back.
    assert totals["watermark"] == W_RUNNING
    assert totals["watermark_utc"] == "2025-11-20T00:00:00.000+00:00"
    assert totals["summary"] == "epoch 2: 6 of 10 records committed, 2 in flight"
    assert totals["cost"] == {
        "requests_made": 8,
        "response_cache_hits": 1,
        "coalesced_calls": 1,
        "calls_saved_by_resume": 2,
    }
    first, second = ns["partitions"]
    assert (first["partition"], first["done_rows"], first["records_total"]) == (0, 3, 3)
    assert (first["epoch"], first["in_flight"], first["finished"]) == (2, 0, True)
    assert (second["done_rows"], second["records_total"], second["in_flight"]) == (3, 7, 2)
    assert second["attempt"] == "a1" and second["watermark"] == W_RUNNING
    assert second["committed_at"].endswith("+00:00")

    filtered = server.call("viewer", "GET", f"{URL_PREFIX}/api/namespaces?dag_id={DAG}", 200)
    assert {n["dag_id"] for n in filtered.json()} == {DAG}
    by_task = server.call(
        "viewer", "GET", f"{URL_PREFIX}/api/namespaces", 200, params={"task_id": "other_task"}
    )
    assert _keys(by_task.json()) == {_as_tuple(VIEWER_DISCARD_KEY)}


def test_viewer_reads_detail(server: Server) -> None:
    detail = server.call("viewer", "GET", _path(KEY), 200).json()
    assert (detail["dag_id"], detail["task_id"], detail["interval_start"]) == _as_tuple(KEY)
    assert [p["partition"] for p in detail["partitions"]] == [0, 1]
    assert detail["totals"]["done_rows"] == 6
    missing = NamespaceKey(DAG, TASK, "2030-01-01T00:00:00+00:00")
    server.call("viewer", "GET", _path(missing), 404)


def test_interval_with_colon_and_plus_round_trips(server: Server) -> None:
    detail = server.call("viewer", "GET", _path(KEY), 200).json()
    links = detail["links"]
    assert links["detail"] == _path(KEY)
    assert "%3A" in links["detail"] and "%2B" in links["detail"]
    with server.client("viewer") as client:
        by_link = client.get(links["detail"])
        assert by_link.status_code == 200, by_link.text
        assert b"%2B00%3A00" in by_link.request.url.raw_path  # really sent encoded
        # Unencoded ':' and '+' are legal in a path and mean the same.
        raw = client.get(f"{URL_PREFIX}/api/namespaces/{DAG}/{TASK}/{INTERVAL}")
        assert raw.status_code == 200, raw.text
    for response in (by_link, raw):
        assert response.json()["interval_start"] == INTERVAL

    # The extra link's URL: filters the page down to exactly this task run.
    url = page_url(DAG, TASK, INTERVAL)
    assert url.startswith(f"{URL_PREFIX}/?")
    assert parse_qs(urlsplit(url).query) == {
        "dag_id": [DAG],
        "task_id": [TASK],
        "interval_start": [INTERVAL],
    }
    page = server.call("viewer", "GET", url, 200).text
    assert page.count("<section") == 1
    assert f'data-namespace="{DAG} / {TASK} / {INTERVAL}"' in page
    assert server.call("viewer", "GET", links["page"], 200).text.count("<section") == 1


def test_page_shows_partition_progress_from_the_browser_cookie(server: Server) -> None:
    # The browser sends Airflow's JWT cookie, not a bearer header.
    with httpx.Client(base_url=server.base_url, cookies={"_token": server.tokens["viewer"]}) as c:
        response = c.get(f"{URL_PREFIX}/", params={"dag_id": DAG, "task_id": TASK})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/html")
    page = response.text
    assert "<script src" not in page and "<link" not in page  # self-contained
    assert "Signed in as viewer" in page
    assert "part 0" in page and "part 1" in page
    assert done_cell("3 / 3") in page  # partition 0: done / total
    assert done_cell("3 / 7") in page  # partition 1
    assert done_cell("6 / 10") in page  # namespace total
    assert "epoch 2: 6 of 10 records committed, 2 in flight" in page
    assert "8 API calls made · saved: 1 by the response cache, 1 by sharing" in page
    assert state_cell("finished") in page and state_cell("budget spent") in page
    assert "2025-11-20T00:00:00.000+00:00" in page  # combined watermark
    assert ">a1<" in page  # attempt
    assert INTERVAL in page
    # A viewer may not edit: no Discard button at all.
    assert "data-discard=" not in page
    assert ">Discard</button>" not in page

    admin = server.call("admin", "GET", f"{URL_PREFIX}/", 200, params={"dag_id": DAG}).text
    assert f'data-discard="{_path(KEY, "/discard")}"' in admin


def test_the_schema_documents_the_api_for_signed_in_users(server: Server) -> None:
    server.call(None, "GET", f"{URL_PREFIX}/openapi.json", 401)
    schema = server.call("viewer", "GET", f"{URL_PREFIX}/openapi.json", 200).json()
    detail = schema["paths"]["/api/namespaces/{dag_id}/{task_id}/{interval_start}"]["get"]
    assert detail["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/NamespaceView"
    }
    models = schema["components"]["schemas"]
    assert {"NamespaceView", "TotalsView", "PartitionView", "DiscardResult"} <= set(models)
    assert "records_total" in models["TotalsView"]["properties"]


def test_a_completed_run_shows_the_totals_of_its_summary(server: Server) -> None:
    """After success the snapshots give way to a completion record: the page and the API
    show its counts, not an empty namespace."""
    key = NamespaceKey(DAG, "completed_task", INTERVAL)
    summary = JobSummary(records_in=10, enriched=9, dead_letters=1, partitions=2)
    SnapshotStore(str(server.snapshot_root)).mark_completed(key, CompletionRecord(summary=summary))
    detail = server.call("viewer", "GET", _path(key), 200).json()
    assert detail["completed"] is True and detail["running"] is False
    totals = detail["totals"]
    assert (totals["done_rows"], totals["records_total"], totals["dead_letter_rows"]) == (10, 10, 1)
    page = server.call("viewer", "GET", f"{URL_PREFIX}/", 200, params={"task_id": key.task_id})
    assert done_cell("10 / 10") in page.text and "completed: output published" in page.text


def test_a_run_into_a_delta_table_shows_the_version_it_committed(server: Server) -> None:
    key = NamespaceKey(DAG, "delta_task", INTERVAL)
    table = {
        "format": "delta",
        "identity": f"{DAG}/delta_task/{INTERVAL}@1",
        "data": {"uri": "s3://lake/customers", "version": 12, "committed": True},
    }
    summary = {"records_in": 10, "enriched": 10, "dead_letters": 0, "table": table}
    record = CompletionRecord(summary=JobSummary.from_json(summary))
    SnapshotStore(str(server.snapshot_root)).mark_completed(key, record)
    detail = server.call("viewer", "GET", _path(key), 200).json()
    assert detail["totals"]["summary"].endswith("in delta table s3://lake/customers version 12")
    page = server.call("viewer", "GET", f"{URL_PREFIX}/", 200, params={"task_id": key.task_id})
    assert "delta table s3://lake/customers version 12" in page.text


def test_crafted_counters_or_lease_show_the_namespace_as_corrupt_never_a_500(
    server: Server,
) -> None:
    """Non-numeric counters in a completion record's cost once raised TypeError and made
    the whole list a 500; a NaN lease expiry read as "running" forever."""
    key = NamespaceKey(DAG, "crafted_task", INTERVAL)
    store = SnapshotStore(str(server.snapshot_root))
    summary = {
        "records_in": 10,
        "enriched": 10,
        "dead_letters": 0,
        "cost": {"requests_made": ["x"]},
    }
    Path(store.namespace_path(key)).mkdir(parents=True)
    Path(store.namespace_path(key), "completed.json").write_text(json.dumps({"summary": summary}))
    lease = Path(store.namespace_path(key), "_lease.json")
    lease.write_text('{"owner": "crafted\\nline", "expires_at": NaN}')
    listed = server.call("viewer", "GET", f"{URL_PREFIX}/api/namespaces", 200).json()
    [crafted] = [ns for ns in listed if ns["task_id"] == key.task_id]
    assert crafted["running"] is False and crafted["completed"] is False
    assert crafted["progress_note"].startswith("The completion record is corrupt (")
    assert "summary.cost.requests_made" in crafted["progress_note"]
    page = server.call("viewer", "GET", f"{URL_PREFIX}/", 200, params={"task_id": key.task_id})
    assert "The completion record is corrupt" in page.text


def test_a_run_holding_its_lease_before_its_first_commit_is_shown_running(server: Server) -> None:
    """The page polls a namespace from the moment its run takes the lease: the detail
    answers before the job record or any snapshot exists."""
    key = NamespaceKey(DAG, "starting_task", INTERVAL)
    SnapshotStore(str(server.snapshot_root)).lease(key, owner="run-9", ttl_s=3600).acquire(0)
    detail = server.call("viewer", "GET", _path(key), 200).json()
    assert detail["running"] is True and detail["partitions"] == []


def test_viewer_may_not_discard(server: Server) -> None:
    response = server.call("viewer", "POST", _path(VIEWER_DISCARD_KEY, "/discard"), 403)
    assert "detail" in response.json()
    detail = server.call("admin", "GET", _path(VIEWER_DISCARD_KEY), 200).json()
    assert detail["totals"]["done_rows"] == 6  # untouched


def test_admin_discards_and_the_namespace_is_gone(server: Server) -> None:
    response = server.call("admin", "POST", _path(DISCARD_KEY, "/discard"), 200)
    assert response.json() == {"discarded": True}
    server.call("admin", "GET", _path(DISCARD_KEY), 404)
    listed = server.call("admin", "GET", f"{URL_PREFIX}/api/namespaces", 200).json()
    assert _as_tuple(DISCARD_KEY) not in _keys(listed)
    assert _as_tuple(KEY) in _keys(listed)  # the other run of the same task is untouched
    assert not SnapshotStore(str(server.snapshot_root)).partitions(DISCARD_KEY)
    again = server.call("admin", "POST", _path(DISCARD_KEY, "/discard"), 200)
    assert again.json() == {"discarded": False}
    # Airflow's audit log names who discarded what.
    logs = server.call(
        "admin", "GET", "/api/v2/eventLogs", 200, params={"event": "enrichment_snapshots_discard"}
    ).json()["event_logs"]
    assert logs and all(e["owner"] == "admin" and e["dag_id"] == DAG for e in logs)
    assert any(DISCARD_KEY.interval_start in (e["extra"] or "") for e in logs)


def test_dag_of_another_team_is_403_and_hidden(server: Server) -> None:
    # viewer is signed in but has no access to team_a's DAG.
    server.call("viewer", "GET", _path(TEAM_KEY), 403)
    server.call("viewer", "GET", f"{URL_PREFIX}/api/namespaces?dag_id={TEAM_DAG}", 403)
    page = server.call("viewer", "GET", f"{URL_PREFIX}/?dag_id={TEAM_DAG}", 403)
    assert page.headers["content-type"].startswith("text/html")
    server.call("viewer", "POST", _path(TEAM_KEY, "/discard"), 403)
    everything = server.call("viewer", "GET", f"{URL_PREFIX}/", 200).text
    assert TEAM_DAG not in everything
    # alice is a viewer in team_a: she reads it, and still may not discard.
    assert server.call("alice", "GET", _path(TEAM_KEY), 200).json()["dag_id"] == TEAM_DAG
    listed = server.call("alice", "GET", f"{URL_PREFIX}/api/namespaces", 200).json()
    assert {_as_tuple(TEAM_KEY), _as_tuple(KEY)} <= _keys(listed)
    server.call("alice", "POST", _path(TEAM_KEY, "/discard"), 403)
    server.call("admin", "GET", _path(TEAM_KEY), 200)


def test_unset_snapshot_root_is_503(server: Server) -> None:
    server.call("admin", "DELETE", "/api/v2/variables/enrichment_snapshot_root", 204)
    try:
        for method, path in ENDPOINTS[2:]:
            user = "admin" if method == "POST" else "viewer"
            response = server.call(user, method, path, 503)
            assert "enrichment_snapshot_root" in response.json()["detail"]
        page = server.call("viewer", "GET", f"{URL_PREFIX}/", 503).text
        assert "enrichment_snapshot_root" in page
        server.call(None, "GET", f"{URL_PREFIX}/api/namespaces", 401)  # auth comes first
    finally:
        server.call(
            "admin",
            "POST",
            "/api/v2/variables",
            201,
            json={"key": "enrichment_snapshot_root", "value": str(server.snapshot_root)},
        )
    server.call("viewer", "GET", f"{URL_PREFIX}/api/namespaces", 200)


def ten_thousand_partitions(count: int = 10_000, every: int = 1) -> ProgressRecord:
    """A generated progress record, as the driver of a job of ``count`` partitions writes it
    once every ``every``-th partition has committed."""
    entry = PartitionEntry(
        partition=0,
        epoch=40,
        input_offset=9_000,
        records_total=100_000,
        committed_rows=8_000,
        dead_letter_rows=12,
        in_flight=64,
        watermark=W_RUNNING,
        committed_at_ms=1_763_600_000_000,
        attempt="s1-t0-a0",
        run_id="run-big",
        requests_made=8_100,
        replayed=100,
    )
    parts = tuple(
        replace(entry, partition=n, attempt=f"s1-t{n}-a0") for n in range(0, count, every)
    )
    return ProgressRecord("run-big", 1_763_600_000_500, count, 100_000 * count, parts)


def test_a_progress_read_of_ten_thousand_partitions_is_three_requests(tmp_path: Path) -> None:
    """The page's read of a 10 000-partition namespace: the record, the lease and the
    listing of its (absent) batches folder, nothing that grows with partitions or cuts;
    a second of CPU is far more than it takes."""
    from enrichment_airflow.web.views import read_namespace

    SnapshotStore(str(tmp_path)).write_progress_record(BIG_KEY, ten_thousand_partitions())
    store = SnapshotStore(counting_url(tmp_path))
    cpu = time.process_time()
    with counted_requests() as requests:
        view = read_namespace(store, BIG_KEY, URL_PREFIX, offset=9_900, limit=100)
    assert view is not None and view.model_dump_json()
    cpu = time.process_time() - cpu
    assert requests == {"GET-range": 2, "LIST": 1}, (
        "a bounded GET of the record, one of the lease, a listing of the batches folder"
    )
    assert cpu < 1.0, f"{cpu:.3f} s of CPU for one page of a 10 000-partition namespace"
    assert [p.partition for p in view.partitions] == list(range(9_900, 10_000))
    assert view.totals.done_rows == 10_000 * 8_012


def test_a_page_of_ten_thousand_partitions_lists_the_pending_ones_at_the_same_cost(
    tmp_path: Path,
) -> None:
    """Half the partitions of a 10 000-partition job have committed: a page lists every
    partition of its range, the missing ones as pending, from the same two requests; the
    largest page the API allows renders with a second of CPU to spare."""
    from enrichment_airflow.web.page import render_page
    from enrichment_airflow.web.views import MAX_PARTITIONS_PAGE, read_namespace

    record = ten_thousand_partitions(every=2)
    SnapshotStore(str(tmp_path)).write_progress_record(BIG_KEY, record)
    store = SnapshotStore(counting_url(tmp_path))
    cpu = time.process_time()
    with counted_requests() as requests:
        view = read_namespace(store, BIG_KEY, URL_PREFIX, offset=9_000, limit=MAX_PARTITIONS_PAGE)
    assert view is not None
    html = render_page([view], filters={}, editable_dag_ids=set(), user_name="viewer")
    cpu = time.process_time() - cpu
    # The progress record and the lease, each read with a bounded range (a lease file
    # larger than any lease is never read whole), and the listing of the batches folder.
    assert requests == {"GET-range": 2, "LIST": 1}
    assert cpu < 1.0, f"{cpu:.3f} s of CPU for 1 000 rows of a 10 000-partition job"
    assert [p.partition for p in view.partitions] == list(range(9_000, 10_000))
    states = [p.state for p in view.partitions]
    assert set(states[0::2]) == {"interrupted"}  # no run holds the namespace
    assert set(states[1::2]) == {"pending"} and "pending" not in states[0::2]
    assert view.partitions_page.total == 10_000
    assert (view.totals.partitions_reported, view.totals.partition_count) == (5_000, 10_000)
    assert html.count('<tr class="pending">') == 500


def test_every_partition_of_the_job_is_listed_the_uncommitted_ones_as_pending(
    server: Server,
) -> None:
    """The driver records the job's partition count: partitions without a commit are rows
    too, on the pages where their numbers fall."""
    store = SnapshotStore(str(server.snapshot_root))
    key = NamespaceKey(DAG, "pending_task", INTERVAL)
    _write_namespace(store, key)
    ProgressFolder(store, key, "run-0", partition_count=4, records_total=20).refresh()
    detail = server.call("viewer", "GET", _path(key), 200).json()
    assert [(p["partition"], p["state"]) for p in detail["partitions"]] == [
        (0, "finished"),
        (1, "budget spent"),
        (2, "pending"),
        (3, "pending"),
    ]
    pending = detail["partitions"][3]
    assert (pending["epoch"], pending["committed_at"], pending["done_rows"]) == (None, None, 0)
    assert detail["partitions_page"]["total"] == 4
    assert (detail["totals"]["partitions_reported"], detail["totals"]["partition_count"]) == (2, 4)
    second = server.call(
        "viewer", "GET", _path(key), 200, params={"partitions_offset": 3, "partitions_limit": 2}
    ).json()
    assert [p["partition"] for p in second["partitions"]] == [3]
    page = server.call("viewer", "GET", f"{URL_PREFIX}/", 200, params={"task_id": key.task_id})
    assert page.text.count('<tr class="pending">') == 2 and '"Partition">part 3</td>' in page.text


def test_a_partition_detached_from_its_batches_is_shown_waiting_for_them(
    server: Server,
) -> None:
    store = SnapshotStore(str(server.snapshot_root))
    key = NamespaceKey(DAG, "detached_task", INTERVAL)
    _write_namespace(store, key, budget_exhausted=False, batches_running=True)
    ProgressFolder(store, key, "run-0", partition_count=2, records_total=10).refresh()
    detail = server.call("viewer", "GET", _path(key), 200).json()
    [detached] = [p for p in detail["partitions"] if p["partition"] == 1]
    assert detached["state"] == "batches running"
    assert "provider batches still running" in detached["state_note"]


def test_a_silent_run_is_shown_stalled_before_its_lease_expires(server: Server) -> None:
    """What a run killed 85 s after its last lease renewal leaves: a live lease (120 s TTL:
    renewed every 40 s) and commits older still. Neither has arrived for over twice its
    interval, and the lease has 35 s to go."""
    store = SnapshotStore(str(server.snapshot_root))
    key = NamespaceKey(DAG, "silent_task", INTERVAL)
    renewed = time.time() - 85
    path = store.namespace_path(key)
    NamespaceLease(LocalFileSystem(), path, "run-big", 120, clock=lambda: renewed).acquire(0)
    record = ten_thousand_partitions(count=4, every=2)
    commits = tuple(
        replace(p, committed_at_ms=int((renewed - 2) * 1000)) for p in record.partitions
    )
    store.write_progress_record(
        key,
        replace(record, partitions=commits, snapshot_interval_ms=500, progress_interval_ms=2000),
    )
    detail = server.call("viewer", "GET", _path(key), 200).json()
    assert detail["running"] is True
    silent = re.compile(r"no progress for (8[5-9]|9[0-9]|1[01][0-9]) s")
    assert silent.fullmatch(detail["stalled"]["text"]), detail["stalled"]
    assert "lease expires in" in detail["stalled"]["note"]
    states = [p["state"] for p in detail["partitions"]]
    assert states == ["stalled", "pending", "stalled", "pending"], states
    assert silent.match(detail["partitions"][0]["state_note"])
    page = server.call("viewer", "GET", f"{URL_PREFIX}/", 200, params={"task_id": key.task_id})
    assert re.search(
        r'<span class="pace stalled" title="[^"]+">no progress for \d+ s</span>', page.text
    )
    live = server.call("viewer", "GET", _path(LIVE_KEY), 200).json()
    assert live["running"] is True and live["stalled"] is None, "renewed: not stalled"


def test_a_namespace_of_ten_thousand_partitions_pages(server: Server) -> None:
    SnapshotStore(str(server.snapshot_root)).write_progress_record(
        BIG_KEY, ten_thousand_partitions()
    )
    started = time.monotonic()
    detail = server.call(
        "viewer", "GET", _path(BIG_KEY), 200, params={"partitions_offset": 9_950}
    ).json()
    print(f"10 000 partitions: one page in {time.monotonic() - started:.3f} s over HTTP")
    assert [p["partition"] for p in detail["partitions"]] == list(range(9_950, 10_000))
    assert detail["partitions_page"] == {"offset": 9_950, "limit": 100, "total": 10_000}
    assert detail["totals"]["partitions_reported"] == 10_000
    assert detail["totals"]["done_rows"] == 10_000 * 8_012
    first = server.call("viewer", "GET", _path(BIG_KEY), 200).json()
    assert [p["partition"] for p in first["partitions"]] == list(range(100))
    page = server.call("viewer", "GET", f"{URL_PREFIX}/", 200, params={"task_id": "big_task"})
    assert "partitions 1–100 of 10\u202f000" in page.text
    assert '"Partition">part 99</td>' in page.text
    assert '"Partition">part 100</td>' not in page.text
    too_many = {"partitions_limit": 10**6}
    server.call("viewer", "GET", _path(BIG_KEY), 422, params=too_many)


def test_a_run_without_a_progress_record_is_shown_saying_so(server: Server) -> None:
    """A run of an earlier version (manifests, no progress.json): no scan, a note."""
    store, key = SnapshotStore(str(server.snapshot_root)), NamespaceKey(DAG, "old_task", INTERVAL)
    _write_namespace(store, key)
    Path(store.namespace_path(key), "progress.json").unlink()
    detail = server.call("viewer", "GET", _path(key), 200).json()
    assert detail["partitions"] == [] and detail["progress_note"].startswith("No progress record")
    page = server.call("viewer", "GET", f"{URL_PREFIX}/", 200, params={"task_id": "old_task"})
    assert "No progress record yet: the job&#x27;s driver writes one" in page.text


@pytest.mark.parametrize(
    "content",
    [b'{"format_version": 1, "partitions": [', b'{"format_version": 1, "run_id": 7}', b"\xff"],
    ids=["truncated", "wrong-type", "binary"],
)
def test_an_unreadable_progress_record_is_reported_and_the_page_answers(
    server: Server, content: bytes
) -> None:
    store, key = SnapshotStore(str(server.snapshot_root)), NamespaceKey(DAG, "bad_task", INTERVAL)
    _write_namespace(store, key)
    Path(store.namespace_path(key), "progress.json").write_bytes(content)
    detail = server.call("viewer", "GET", _path(key), 200).json()
    assert detail["progress_note"].startswith("The progress record is unreadable (")
    assert detail["partitions"] == []
    page = server.call("viewer", "GET", f"{URL_PREFIX}/", 200, params={"task_id": "bad_task"})
    assert "The progress record is unreadable" in page.text


def test_snapshots_of_a_dag_unknown_to_airflow_are_for_admins_only(server: Server) -> None:
    viewer = server.call("viewer", "GET", f"{URL_PREFIX}/api/namespaces", 200).json()
    assert _as_tuple(UNKNOWN_KEY) not in _keys(viewer)
    server.call("viewer", "GET", _path(UNKNOWN_KEY), 403)
    server.call("viewer", "POST", _path(UNKNOWN_KEY, "/discard"), 403)
    admin = server.call("admin", "GET", f"{URL_PREFIX}/api/namespaces", 200).json()
    assert _as_tuple(UNKNOWN_KEY) in _keys(admin)
    server.call("admin", "GET", _path(UNKNOWN_KEY), 200)


def test_the_list_pages(server: Server) -> None:
    everything = server.call("admin", "GET", f"{URL_PREFIX}/api/namespaces", 200).json()
    assert len(everything) >= 3
    pages = [
        server.call(
            "admin", "GET", f"{URL_PREFIX}/api/namespaces", 200, params={"offset": i, "limit": 1}
        ).json()
        for i in range(len(everything))
    ]
    # (the same namespaces in the same order; ages in their texts move on meanwhile)
    assert [_as_tuple_of(page[0]) for page in pages] == [_as_tuple_of(n) for n in everything]
    server.call("admin", "GET", f"{URL_PREFIX}/api/namespaces", 422, params={"limit": 10**6})


def test_a_discard_from_another_site_is_refused(server: Server) -> None:
    """A forged request riding on the admin's cookie carries the attacker's Origin."""
    forged = server.call(
        "admin",
        "POST",
        _path(KEY, "/discard"),
        403,
        headers={"Origin": "https://evil.example"},
    )
    assert "Cross-site" in forged.text
    assert SnapshotStore(str(server.snapshot_root)).partitions(KEY), "nothing discarded"


def test_a_partition_whose_manifests_are_all_corrupt_is_shown_as_such(server: Server) -> None:
    detail = server.call("viewer", "GET", _path(CORRUPT_KEY), 200).json()
    assert detail["corrupt_partitions"] == [1]
    assert [(p["partition"], p["state"]) for p in detail["partitions"]] == [
        (0, "finished"),
        (1, "corrupt"),
    ]
    assert detail["partitions"][1]["state_note"].startswith("no valid snapshot")
    page = server.call(
        "viewer", "GET", f"{URL_PREFIX}/", 200, params={"dag_id": DAG, "task_id": "corrupt_task"}
    ).text
    assert '"Partition">part 1</td>' in page and state_cell("corrupt") in page


def test_the_page_tells_a_running_partition_from_an_interrupted_one(server: Server) -> None:
    """Unfinished partitions of a namespace whose run holds its lease are running; with no
    live lease (the run crashed) they are interrupted, with the time of their last commit."""
    live = server.call("viewer", "GET", f"{URL_PREFIX}/", 200, params={"task_id": "live_task"})
    assert state_cell("running") in live.text and ">interrupted" not in live.text
    stopped = server.call(
        "viewer", "GET", f"{URL_PREFIX}/", 200, params={"task_id": "stopped_task"}
    )
    assert re.search(
        r'title="interrupted: last commit \d+ (s|min) ago; [^"]+">interrupted</span></td>',
        stopped.text,
    )
    assert server.call("viewer", "GET", _path(STOPPED_KEY), 200).json()["running"] is False
    assert server.call("viewer", "GET", _path(LIVE_KEY), 200).json()["running"] is True


def test_a_batch_runs_provider_batches_show_as_its_partitions_last_saw_them(
    tmp_path: Path,
) -> None:
    """Batch mode: the batches of the partitions shown, from their journals' progress
    files (status and counts, escaped on the page); hostile progress files are left out,
    and partitions off the page are not read."""
    from enrichment_airflow.web.page import render_page
    from enrichment_airflow.web.views import read_namespace
    from spark_jobs.records.batch_intent import BatchProgress
    from spark_jobs.snapshots.batch_journal import BatchJournal

    SnapshotStore(str(tmp_path)).write_progress_record(BIG_KEY, ten_thousand_partitions(200))
    namespace = SnapshotStore(str(tmp_path)).namespace_path(BIG_KEY)
    seen = 1_763_600_000.0
    batches = {
        3: [BatchProgress("batch_3", "in_progress", 500, 120, 2, seen)],
        4: [
            BatchProgress("batch_4", "<b>validating</b>", 40, 0, 0, seen),
            BatchProgress("batch_huge", "in_progress", 10**12, 0, 0, seen),  # no batch is
        ],
        150: [BatchProgress("batch_150", "completed", 500, 500, 0, seen)],  # off the page
    }
    for partition, progress in batches.items():
        journal = BatchJournal(LocalFileSystem(), namespace, partition)
        for each in progress:
            journal.record_progress(journal.record_intent(["c1"], None), each)
    (Path(BatchJournal(LocalFileSystem(), namespace, 4).directory) / "x.progress").write_text("{")

    store = SnapshotStore(counting_url(tmp_path))
    with counted_requests() as requests:
        view = read_namespace(store, BIG_KEY, URL_PREFIX, offset=0, limit=100)
    assert view is not None
    shown = [(b.partition, b.batch_id, b.status, b.done, b.total, b.failed) for b in view.batches]
    assert shown == [
        (3, "batch_3", "in_progress", 120, 500, 2),
        (4, "batch_4", "<b>validating</b>", 0, 40, 0),
    ]
    assert view.batches[0].seen_at == "2025-11-20T00:53:20.000+00:00"
    assert requests["LIST"] == 3, "the batches folder, then partitions 3 and 4 only"
    html = render_page([view], filters={}, editable_dag_ids=set(), user_name="viewer")
    assert "provider batches" in html and "120 of 500 done, 2 failed" in html
    assert "&lt;b&gt;validating&lt;/b&gt;" in html and "<b>validating" not in html
    assert "batch_150" not in html and "batch_huge" not in html
