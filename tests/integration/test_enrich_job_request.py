"""The job against a POST JSON API with an API key in a header: secrets checked on the
driver before Spark starts, the body filled from each record (a null stays ``null``), no
``Authorization`` header unless asked for, and a task log without Spark's INFO lines
unless ``--spark-log-level`` raises it (under spark-submit, as the Airflow operator runs
it: PySpark's own launch, ``python -m``, shows Spark's WARN and above only)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from spark_jobs.launch import with_java_options

from .job_support import ROOT, read_output, run_job
from .json_api_support import PATH, KeyedJsonApi

pytestmark = pytest.mark.spark

KEY = "k3y-6c1d0e-secret"
#: A Spark (log4j2) line: "26/11/24 10:53:36 INFO SparkContext: ...".
SPARK_INFO = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d INFO ", re.M)


def write_addresses(path: Path, count: int) -> list[dict]:
    rows = [
        {"id": f"a{i:04d}", "street": f"{i} Main St", "unit": None if i % 2 else f"{i}B"}
        for i in range(count)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return rows


def spec_args(tmp: Path, url: str, *extra: str) -> list[str]:
    spec = tmp / "spec.yaml"
    spec.write_text(
        f"input: {tmp / 'in'}\noutput: {tmp / 'out'}\nsnapshot_dir: {tmp / 'snapshots'}\n"
        f"key_column: id\nurl_template: {url}{PATH}\npartitions: 2\n"
        "response_fields: {lat: ['$.result.lat', float]}\n"
        "http:\n  method: POST\n"
        '  body_template: {address: "{street}", unit: "{unit}", country: DE}\n'
        "  secret_headers: {X-Api-Key: GEO_API_KEY}\n"
    )
    return ["--spec", str(spec), *extra]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            [],
            "http.secret_headers.X-Api-Key: environment variable GEO_API_KEY is not set",
        ),
        (["--token-env", "GEO_TOKEN"], "http.token_env: environment variable GEO_TOKEN is not set"),
    ],
)
def test_a_missing_secret_fails_before_spark_starts_naming_its_option(tmp_path, flags, message):
    write_addresses(tmp_path / "in" / "part.jsonl", 3)
    env = {"GEO_API_KEY": "" if not flags else KEY}
    status, output = run_job(spec_args(tmp_path, "http://127.0.0.1:9", *flags), env)
    assert status == 2, output
    assert output.strip() == f"enrich_job: error: {message}"  # one line, no traceback
    assert "Spark" not in output and "WARN" not in output, "a JVM started"
    assert not (tmp_path / "snapshots").exists()


def test_a_post_json_api_gets_the_key_header_and_the_body_and_the_log_stays_quiet(tmp_path):
    rows = write_addresses(tmp_path / "in" / "part.jsonl", 40)
    with KeyedJsonApi(KEY) as api:
        status, output = run_job(spec_args(tmp_path, api.url), {"GEO_API_KEY": KEY})
        assert status == 0, output
        calls = list(api.calls)
        data, dead, _ = read_output(tmp_path / "out")
        assert dead == [] and len(data) == 40
        by_address = {call["body"]["address"]: call for call in calls}
        assert len(calls) == 40 and set(by_address) == {row["street"] for row in rows}
        for row in rows:
            call = by_address[row["street"]]
            assert call["body"] == {"address": row["street"], "unit": row["unit"], "country": "DE"}
            assert call["headers"]["X-Api-Key"] == KEY
            assert call["headers"]["Content-Type"] == "application/json"
            assert "Authorization" not in call["headers"]
        assert KEY not in output
        assert SPARK_INFO.findall(output) == [], "Spark's INFO lines in the default log"
        assert "starting fresh" in output and "INFO enrich_job: summary:" in output

        # Raised, as the operator does it: spark-submit with the shipped file at INFO.
        conf = with_java_options({}, "INFO")
        submit = [
            *("spark-submit", "--master", "local[2]", "--conf"),
            *(f"{key}={value}" for key, value in conf.items()),
            str(ROOT / "spark_jobs" / "enrich_job.py"),
            *spec_args(tmp_path, api.url, "--resume", "never", "--spark-log-level", "INFO"),
        ]
        raised = subprocess.run(
            submit, cwd=ROOT, env={**os.environ, "GEO_API_KEY": KEY}, capture_output=True, text=True
        )
    output = raised.stdout + raised.stderr
    assert raised.returncode == 0, output
    assert len(SPARK_INFO.findall(output)) > 20, "--spark-log-level INFO shows Spark's lines"
    assert KEY not in output


def test_a_secret_the_spark_conf_gives_the_executors_passes_the_drivers_check(tmp_path):
    """Cluster deploy modes hand variables to executors through the Spark conf, not the
    driver's environment: such a variable is accepted, and the executors do get it."""
    write_addresses(tmp_path / "in" / "part.jsonl", 6)
    env = {k: v for k, v in os.environ.items() if k != "GEO_API_KEY"}
    with KeyedJsonApi(KEY) as api:
        submit = [
            *("spark-submit", "--master", "local[2]"),
            *("--conf", f"spark.executorEnv.GEO_API_KEY={KEY}"),
            str(ROOT / "spark_jobs" / "enrich_job.py"),
            *spec_args(tmp_path, api.url),
        ]
        result = subprocess.run(submit, cwd=ROOT, env=env, capture_output=True, text=True)
        calls = list(api.calls)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(calls) == 6 and all(c["headers"]["X-Api-Key"] == KEY for c in calls)


def test_secrets_handed_to_the_executors_in_the_spark_conf_are_redacted_in_its_event_log(
    tmp_path,
):
    """``spark.executorEnv.<VAR>`` shows in the Spark UI (its environment page, the REST
    API, the event log the history server reads), which hides a setting only when Spark's
    redaction pattern matches its name or value: ``GEO_API_KEY`` and
    ``OTEL_EXPORTER_OTLP_HEADERS`` it did not. The job extends the pattern with both."""
    write_addresses(tmp_path / "in" / "part.jsonl", 4)
    key = "g30-7f3a9c1d"  # no "secret" in it, which Spark's own pattern would match
    otlp = "Authorization=Basic b3RscC1rM3k="
    events = tmp_path / "events"
    events.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "GEO_API_KEY"}
    with KeyedJsonApi(key) as api:
        submit = [
            *("spark-submit", "--master", "local[2]"),
            *("--conf", f"spark.executorEnv.GEO_API_KEY={key}"),
            *("--conf", f"spark.executorEnv.OTEL_EXPORTER_OTLP_HEADERS={otlp}"),
            *("--conf", "spark.eventLog.enabled=true", "--conf", f"spark.eventLog.dir={events}"),
            *("--conf", "spark.eventLog.compress=false"),
            str(ROOT / "spark_jobs" / "enrich_job.py"),
            *spec_args(tmp_path, api.url),
        ]
        result = subprocess.run(submit, cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    text = "".join(path.read_text() for path in events.rglob("*") if path.is_file())
    assert '"spark.executorEnv.GEO_API_KEY":"*********(redacted)"' in text
    assert '"spark.executorEnv.OTEL_EXPORTER_OTLP_HEADERS":"*********(redacted)"' in text
    assert key not in text and "b3RscC1rM3k" not in text
