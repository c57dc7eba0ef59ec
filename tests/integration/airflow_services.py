"""Airflow 3 as it runs in production, on loopback: api-server (UI, REST and the task
execution API), scheduler with the LocalExecutor, dag-processor."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .airflow_support import BIN, ROOT
from .job_support import free_port


class AirflowServices:
    def __init__(self, env: dict[str, str], home: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **env,
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API_AUTH__JWT_SECRET": "test-secret-for-jwt-signing-at-least-32-bytes-long",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "300",
        }
        self.home = home
        self.processes: list[subprocess.Popen] = []

    def start(self) -> None:
        for name, args in (
            ("api-server", ["api-server", "--port", str(self.port), "--host", "127.0.0.1"]),
            ("scheduler", ["scheduler"]),
            ("dag-processor", ["dag-processor"]),
        ):
            log = (self.home / f"{name}.log").open("w")
            self.processes.append(
                subprocess.Popen(
                    [str(BIN / "airflow"), *args],
                    env=self.env,
                    cwd=ROOT,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        self.wait_for(lambda: self.request("GET", "/api/v2/monitor/health"), 120, "api-server")

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text()[-4000:]}"
            for path in sorted(self.home.glob("*.log"))
        )

    def request(self, method: str, path: str, body: Any = None) -> Any:
        request = urllib.request.Request(
            self.url + path,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method=method,
        )
        with urllib.request.urlopen(request, timeout=30) as response:
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


@contextmanager
def airflow_services(env: dict[str, str], home: Path):
    services = AirflowServices(env, home)
    try:
        services.start()
        yield services
    finally:
        services.stop()
