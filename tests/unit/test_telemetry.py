"""Telemetry's switch: off unless an endpoint is given (flag, spec file or the standard
variable), and then nothing of OpenTelemetry loads; a bad endpoint is refused by name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from spark_jobs.driver.lineage_parent import with_lineage_parent
from spark_jobs.spec.job_cli import parse_args
from spark_jobs.spec.spec_error import SpecError
from spark_jobs.telemetry import NO_TELEMETRY, partition_telemetry

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = ["--input", "in", "--output", "out", "--key-column", "id", "--snapshot-dir", "s"]
REQUIRED += ["--url-template", "http://api/c/{id}", "--response-field", "name=$.name"]


def test_telemetry_is_off_by_default_and_loads_no_opentelemetry_module():
    """The partition runner, the enricher and the switch import, with telemetry off, not
    one ``opentelemetry`` module (in a fresh interpreter: this one may have loaded them)."""
    script = (
        "import sys\n"
        "from spark_jobs.spec.job_cli import parse_args\n"
        "import spark_jobs.partition_runner, spark_jobs.partition_runner.row_enrichment\n"
        "from spark_jobs.telemetry import NO_TELEMETRY, partition_telemetry\n"
        f"spec = parse_args({REQUIRED!r})\n"
        "assert partition_telemetry(spec, 0, 'a', 'r') is NO_TELEMETRY\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('opentelemetry'))\n"
        "assert not loaded, loaded\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr


def test_the_standard_variable_turns_it_on_and_the_flag_wins(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    assert parse_args(REQUIRED).otel_endpoint is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    assert parse_args(REQUIRED).otel_endpoint == "http://collector:4318"
    flagged = parse_args([*REQUIRED, "--otel-endpoint", "https://other:4318"])
    assert flagged.otel_endpoint == "https://other:4318"
    assert partition_telemetry(parse_args(REQUIRED), 0, "a", "r") is not NO_TELEMETRY


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--otel-endpoint", "collector:4318"], "--otel-endpoint: must be an http(s) URL"),
        (["--otel-endpoint", "http://u:pw@collector:4318"], "--otel-endpoint: must not hold"),
        (["--otel-endpoint", "http://c:4318/?key=x"], "--otel-endpoint: must not hold"),
        (["--otel-interval", "0"], "--otel-interval: must be > 0"),
    ],
)
def test_bad_telemetry_options_name_the_option(flags, message, monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    with pytest.raises(SpecError) as error:
        parse_args([*REQUIRED, *flags])
    assert message in str(error.value)
    assert "pw" not in str(error.value)


def test_the_parent_job_the_spark_provider_injects_names_the_metrics(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    conf = {
        "spark.openlineage.parentJobNamespace": "airflow",
        "spark.openlineage.parentJobName": "daily.enrich",
        "spark.openlineage.parentRunId": "0190-run",
    }
    spec = with_lineage_parent(parse_args(REQUIRED), conf.get)
    assert spec.lineage_parent == {
        "namespace": "airflow",
        "name": "daily.enrich",
        "run_id": "0190-run",
    }
    assert with_lineage_parent(parse_args(REQUIRED), {}.get).lineage_parent == {}
