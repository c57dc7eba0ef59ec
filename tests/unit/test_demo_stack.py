"""``make demo``'s Airflow (``demo/stack.py``), checked without starting it: nothing it
starts listens beyond loopback, and the secret that signs its JWTs is new every run."""

from __future__ import annotations

import pytest

from demo.stack import AirflowServices


def services(tmp_path) -> AirflowServices:
    return AirflowServices({"PATH": "/usr/bin"}, tmp_path)


def test_demo_services_listen_on_loopback_or_not_at_all(tmp_path):
    commands = dict(services(tmp_path).commands())
    api = commands["api-server"]
    assert api[api.index("--host") + 1] == "127.0.0.1"
    # The LocalExecutor's log server (port 8793) would bind every interface.
    assert "--skip-serve-logs" in commands["scheduler"]
    assert set(commands) == {"api-server", "scheduler", "dag-processor"}


@pytest.mark.airflow
def test_demo_scheduler_flag_is_one_the_installed_airflow_accepts():
    from airflow.cli.cli_parser import get_parser

    assert get_parser().parse_args(["scheduler", "--skip-serve-logs"]).skip_serve_logs


def test_demo_jwt_secret_is_random_per_run(tmp_path):
    first, second = services(tmp_path).env, services(tmp_path).env
    secret = first["AIRFLOW__API_AUTH__JWT_SECRET"]
    assert len(secret) >= 64 and secret != second["AIRFLOW__API_AUTH__JWT_SECRET"]
    assert "test-secret" not in secret
