"""Publishing into a Delta table on S3 semantics (a moto server on loopback): one commit
per publish, a retry after the commit landed and a zombie beside it commit nothing, and
delta-rs and Polars read every record once. delta-rs and s3fs both take the endpoint and
credentials from the standard AWS environment variables. moto runs in a process of its own:
served from a thread of the test's process it never answers delta-rs once s3fs has run
there (delta-rs's list request times out after 180 s)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import boto3
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import s3fs
from deltalake import DeltaTable

from spark_jobs.driver.delta_publish import TableIdentity, commit_files
from spark_jobs.driver.publish import staging_for

IDENTITY = TableIdentity("dag/enrich/2026-12-01", 1)


def always() -> bool:
    return True


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}"
    s3fs.S3FileSystem.clear_instance_cache()
    server.terminate()
    server.wait()


@pytest.fixture
def table(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    for name, value in {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "AKIDDELTATEST",
        "AWS_SECRET_ACCESS_KEY": "delta-test-secret",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }.items():
        monkeypatch.setenv(name, value)
    s3fs.S3FileSystem.clear_instance_cache()
    bucket = f"tables-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
    return f"s3://{bucket}/customers"


def spark_write(table: str, run_id: str, ids: range, files: int = 3) -> str:
    """A run's Parquet files in its own run folder inside the table's folder, on S3."""
    fs = s3fs.S3FileSystem()
    data = f"{staging_for(table, run_id)}/data"
    rows = list(ids)
    for part in range(files):
        chunk = rows[part::files]
        with fs.open(f"{data}/part-{part:05d}.parquet", "wb") as handle:
            pq.write_table(pa.table({"id": chunk}), handle)
    fs.pipe_file(f"{data}/_SUCCESS", b"")
    return data


def test_a_retry_and_a_zombie_after_the_commit_commit_nothing_on_s3(table: str) -> None:
    first = commit_files(table, spark_write(table, "try-1", range(10)), IDENTITY, always)
    retry = commit_files(table, spark_write(table, "try-2", range(10)), IDENTITY, always)
    zombie = commit_files(table, spark_write(table, "zombie", range(10)), IDENTITY, always)
    assert (first.committed, retry.committed, zombie.committed) == (True, False, False)
    delta = DeltaTable(table)
    assert len(delta.history()) == 1
    assert delta.transaction_version(IDENTITY.app_id) == 1
    assert sorted(pl.from_arrow(delta.to_pyarrow_table())["id"].to_list()) == list(range(10))
    assert sorted(pl.read_delta(table)["id"].to_list()) == list(range(10))
