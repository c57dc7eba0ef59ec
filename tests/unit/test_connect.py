"""The job as a Spark Connect client, without a server: which URL a run uses, where a
token may come from, and the code it ships (importable from the zip alone)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from spark_jobs.launch import REMOTE_ENV, redacted
from spark_jobs.session.connect import code_zip, remote_url
from spark_jobs.spec.job_cli import parse_args
from spark_jobs.spec.spec_error import SpecError

REQUIRED = [
    *("--input", "in", "--output", "out", "--key-column", "id", "--snapshot-dir", "snap"),
    *("--url-template", "http://api/c/{id}", "--response-field", "name=$.name"),
]
URL_WITH_TOKEN = "sc://connect.example:443/;use_ssl=true;token=t0ken-s3cret"


def test_remote_comes_from_the_flag_then_spark_remote(monkeypatch):
    monkeypatch.setenv(REMOTE_ENV, URL_WITH_TOKEN)
    assert remote_url(parse_args([*REQUIRED, "--remote", "sc://a:15002"]).remote) == "sc://a:15002"
    assert remote_url(parse_args(REQUIRED).remote) == URL_WITH_TOKEN
    monkeypatch.delenv(REMOTE_ENV)
    assert remote_url(parse_args(REQUIRED).remote) is None  # classic Spark


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--remote", URL_WITH_TOKEN],
            f"put the URL with its token in the environment variable {REMOTE_ENV}",
        ),
        (
            ["--remote", "http://connect:15002"],
            "remote: expected a Spark Connect URL sc://host:port",
        ),
    ],
)
def test_a_remote_the_job_cannot_use_is_refused_naming_the_option(extra, message):
    with pytest.raises(SpecError) as refused:
        parse_args([*REQUIRED, *extra])
    assert message in str(refused.value) and "t0ken-s3cret" not in str(refused.value)


def test_a_token_is_hidden_in_what_is_logged():
    assert redacted(URL_WITH_TOKEN) == "sc://connect.example:443/;use_ssl=true;token=***"
    assert redacted("sc://a:15002") == "sc://a:15002"


def test_the_shipped_zip_alone_imports_the_job(tmp_path):
    """What a Connect server's worker finds: the zip on its path and nothing else of
    this project (not the worktree, not the editable install)."""
    data = code_zip()
    assert data == code_zip(), "the same code must give the same artifact name"
    archive = tmp_path / "spark_jobs.zip"
    archive.write_bytes(data)
    probe = (
        "import sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if 'resumable_enrichment' not in repr(f)]\n"
        f"sys.path[:] = [{str(archive)!r}, *sys.path[1:]]\n"
        "import spark_jobs.enrich_job, spark_jobs.partition_runner.runner\n"
        "print(spark_jobs.__file__)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == f"{archive}/spark_jobs/__init__.py"
    assert b"__pycache__" not in data


def test_a_pex_beside_spark_connect_is_refused_wherever_the_url_comes_from(monkeypatch):
    with pytest.raises(SpecError, match="ship_env: a PEX cannot become"):
        remote_url("sc://a:15002", "dist/enrich_env.pex")
    monkeypatch.setenv(REMOTE_ENV, URL_WITH_TOKEN)
    with pytest.raises(SpecError, match="ship_env: a PEX cannot become") as refused:
        remote_url(None, "dist/enrich_env.pex")
    assert "t0ken-s3cret" not in str(refused.value)
