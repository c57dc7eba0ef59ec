"""Starting the pieces of the demo on loopback: the demo API as its own process and a real
Airflow (api-server, scheduler with the LocalExecutor, dag-processor) with a project-local
AIRFLOW_HOME on SQLite. Used by ``make demo`` and by the integration tests alike."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from demo.airflow_sqlite import BUSY_TIMEOUT_S
from demo.users import Users

#: A REST call can wait the whole SQLite busy timeout for the write lock (the scheduler
#: and task processes hold it in turn on a busy machine), then do its work.
REST_TIMEOUT_S = BUSY_TIMEOUT_S + 30

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def settled(count: Callable[[], int], quiet_s: float = 0.3) -> int:
    """``count()`` once it has not moved for ``quiet_s``: a server's count of calls after
    a killed client's requests still in it are counted too."""
    last = -1
    while (total := count()) != last:
        last = total
        time.sleep(quiet_s)
    return total


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class DemoApiProcess:
    """The demo API as its own process, with /stats and /faults helpers."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        latency = args[args.index("--latency-ms") + 1] if "--latency-ms" in args[:-1] else "0"
        # A call in the server is counted only as it is answered, one latency later; the
        # Python workers of a killed Spark driver may start more for a moment.
        self.settle_s = max(0.3, 2 * float(latency) / 1000 + 0.5)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "demo.api", "--port", str(self.port), *args],
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        # Returns once it answers: 120 s only for a machine so busy a Python start takes 20.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                self.get("/health")
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("demo API did not start")

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=5) as response:
            return json.loads(response.read())

    def post(self, path: str, body: dict | None = None, method: str = "POST") -> Any:
        request = urllib.request.Request(
            self.url + path,
            data=json.dumps(body or {}).encode(),
            headers={"Content-Type": "application/json"},
            method=method,
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read() or b"{}")

    def heal(self) -> None:
        """Back to the knobs the server started with (ends an injected outage)."""
        self.post("/faults", method="DELETE")

    def calls_per_key(self) -> Counter:
        return Counter(self.get("/stats")["per_key"])

    def settled_calls(self) -> int:
        """Total calls once requests of a killed client still in the server are counted."""
        return settled(lambda: sum(self.calls_per_key().values()), self.settle_s)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


@contextmanager
def demo_api(*args: str, env: dict[str, str] | None = None):
    api = DemoApiProcess(*args, env=env)
    try:
        yield api
    finally:
        api.stop()


def airflow_env(
    home: Path,
    api_url: str,
    data_root: Path,
    snapshot_root: Path,
    *,
    api_token: str = "s3cr3t-token",
    spark_master: str = "local[2]",
    **extra: str,
) -> dict[str, str]:
    """Airflow configured as users configure it: connections and variables from the
    environment (``AIRFLOW_CONN_*``, ``AIRFLOW_VAR_*``), the API token in the connection."""
    (home / "plugins").mkdir(parents=True, exist_ok=True)  # the plugin comes by entry point
    host, port = api_url.removeprefix("http://").split(":")
    return {
        **os.environ,
        # demo/ is not installed: Airflow (the SQLite connect args) and the job's workers
        # (demo enrichers) import it from this checkout.
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(home / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": "demo.airflow_sqlite.CONNECT_ARGS",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC": "demo.airflow_sqlite.CONNECT_ARGS",
        "AIRFLOW_CONN_SPARK_ENRICH": json.dumps({"conn_type": "spark", "host": spark_master}),
        "AIRFLOW_CONN_ENRICHMENT_API": json.dumps(
            {
                "conn_type": "http",
                "host": host,
                "port": int(port),
                "schema": "http",
                "password": api_token,
            }
        ),
        "AIRFLOW_VAR_ENRICHMENT_DATA_ROOT": str(data_root),
        "AIRFLOW_VAR_ENRICHMENT_SNAPSHOT_ROOT": str(snapshot_root),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYSPARK_PYTHON": sys.executable,
        **extra,
    }


def airflow(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "airflow"), *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def init_airflow(env: dict[str, str], *more: tuple[str, ...]) -> None:
    """Create the metadata database and the pool that caps concurrent API load, then run
    ``more`` commands (e.g. ``("teams", "sync")``)."""
    migrate_env = {**env, **_DEFERRED}
    pool = ("pools", "set", "enrichment_api", "4", "API load")
    steps = [(("db", "migrate"), migrate_env), (pool, env), *((command, env) for command in more)]
    for command, command_env in steps:
        result = airflow(command_env, *command)
        assert result.returncode == 0, result.stdout + result.stderr


#: ``airflow db migrate`` and the api-server keep SQLite's deferred transactions (see
#: ``demo.airflow_sqlite``): with BEGIN IMMEDIATE the api-server's sessions hold the write
#: lock while a request runs, and the UI's parallel requests wait out the busy timeout.
_DEFERRED = dict.fromkeys(
    (
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC",
    ),
    "demo.airflow_sqlite.DEFERRED_CONNECT_ARGS",
)


class AirflowServices:
    def __init__(
        self, env: dict[str, str], home: Path, users: Users | None = None, triggerer: bool = False
    ) -> None:
        """``triggerer``: run Airflow's triggerer too, for deferred tasks."""
        self.port = free_port()
        self.triggerer = triggerer
        self.url = f"http://127.0.0.1:{self.port}"
        self.users = users
        self._tokens: dict[str, str] = {}
        self.env = {
            **env,
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__API__PORT": str(self.port),
            # Signs every UI, API and task JWT: fresh per run, never a published value.
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "300",
            **(users.env(home) if users else {}),
        }
        self.home = home
        self.processes: list[subprocess.Popen] = []

    def commands(self) -> list[tuple[str, list[str]]]:
        """Each service and its ``airflow`` arguments: on loopback, or not listening."""
        return [
            ("api-server", ["api-server", "--port", str(self.port), "--host", "127.0.0.1"]),
            # The LocalExecutor's log server binds every interface (Airflow has no host
            # setting for it); the api-server reads the task logs from AIRFLOW_HOME anyway.
            ("scheduler", ["scheduler", "--skip-serve-logs"]),
            ("dag-processor", ["dag-processor"]),
            *([("triggerer", ["triggerer", "--skip-serve-logs"])] if self.triggerer else []),
        ]

    def start(self) -> None:
        for name, args in self.commands():
            log = (self.home / f"{name}.log").open("w")
            self.processes.append(
                subprocess.Popen(
                    [str(BIN / "airflow"), *args],
                    env={**self.env, **(_DEFERRED if name == "api-server" else {})},
                    cwd=ROOT,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        self.wait_for(lambda: self.request("GET", "/api/v2/monitor/health"), 120, "api-server")

    def stop(self) -> None:
        """Stop each service with its children (LocalExecutor workers, Spark)."""
        for process in self.processes:
            _signal_group(process, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait(10)
        for process in self.processes:  # orphans left in the group after the leader exited
            _signal_group(process, signal.SIGKILL)

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text()[-4000:]}"
            for path in sorted(self.home.glob("*.log"))
        )

    def token(self, name: str) -> str:
        """A JWT of user ``name`` (what the UI keeps in its ``_token`` cookie)."""
        if name not in self._tokens:
            assert self.users is not None, "no users: everyone is admin without signing in"
            _, password = self.users.accounts[name]
            credentials = {"username": name, "password": password}
            request = urllib.request.Request(
                f"{self.url}/auth/token",
                data=json.dumps(credentials).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=REST_TIMEOUT_S) as response:
                self._tokens[name] = json.loads(response.read())["access_token"]
        return self._tokens[name]

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """A REST call; as the admin user when there are users."""
        headers = {"Content-Type": "application/json"}
        if self.users:
            headers["Authorization"] = f"Bearer {self.token(self.users.admin)}"
        request = urllib.request.Request(
            self.url + path,
            data=None if body is None else json.dumps(body).encode(),
            headers=headers,
            method=method,
        )
        with urllib.request.urlopen(request, timeout=REST_TIMEOUT_S) as response:
            payload = response.read()
        return json.loads(payload) if payload else None

    @staticmethod
    def wait_for(check, timeout: float, what: str, interval: float = 1.0) -> Any:
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            try:
                result = check()
                if result:
                    return result
            except (OSError, urllib.error.HTTPError, KeyError) as error:
                last_error = error
            time.sleep(interval)
        raise TimeoutError(f"timed out waiting for {what} (last error: {last_error})")

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict:
        return self.request(
            "GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}"
        )

    def dag_run(self, dag_id: str, run_id: str) -> dict:
        return self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


@contextmanager
def airflow_services(
    env: dict[str, str], home: Path, users: Users | None = None, triggerer: bool = False
):
    services = AirflowServices(env, home, users, triggerer)
    try:
        services.start()
        yield services
    finally:
        services.stop()
