"""Publishing into Delta and Iceberg tables on S3 semantics (a moto server on loopback), through the
job's publish step with the snapshot namespace on S3 too: a kill at each step of the
publish then a retry commits the run once, a zombie beside it nothing, the write modes and
both dead-letter layouts; delta-rs and Polars read every record once. A publish costs the
same number of storage requests whatever the number of files the run wrote.

delta-rs and s3fs both take the endpoint and credentials from the standard AWS
environment variables. moto runs in a process of its own: served from a thread of the
test's process it never answers delta-rs once s3fs has run there (delta-rs's list request
times out after 180 s). moto's recorder counts the requests it serves: delta-rs's own
client is not fsspec, so the counting filesystem of ``benchmarks/storage_requests.py``
cannot see them, the server sees every request of both."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import polars as pl
import pytest
import s3fs
from pyiceberg.catalog import load_catalog

from spark_jobs.driver import iceberg_publish, table_publish
from spark_jobs.driver.table_publish import dead_letter_table
from spark_jobs.records.summary import JobSummary
from spark_jobs.snapshots import SnapshotStore
from tests.table_support import (
    DAY,
    KEY,
    KILL_POINTS,
    dead,
    die_after,
    die_before,
    enriched,
    ids_in,
    killed_then_retried,
    publish_try,
    run_commits,
    spec_for,
    staged,
)


@dataclass(frozen=True)
class MotoServer:
    url: str
    recording: Path

    def reset(self) -> None:
        self._post("reset-recording")

    def requests(self) -> Counter[str]:
        """The requests served since :meth:`reset`, by method and kind (LIST: a bucket
        listing)."""
        kinds: Counter[str] = Counter()
        for line in self.recording.read_text().splitlines():
            entry = json.loads(line)
            listing = "list-type=" in entry["url"] or "delimiter=" in entry["url"]
            kinds["LIST" if entry["method"] == "GET" and listing else entry["method"]] += 1
        return kinds

    def _post(self, action: str) -> None:
        request = urllib.request.Request(f"{self.url}/moto-api/recorder/{action}", method="POST")
        urllib.request.urlopen(request, timeout=10).close()


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    recording = tmp_path_factory.mktemp("moto") / "requests.jsonl"
    recording.touch()
    environment = {"MOTO_ENABLE_RECORDING": "true", "MOTO_RECORDER_FILEPATH": str(recording)}
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    server = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **environment},
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    yield MotoServer(f"http://127.0.0.1:{port}", recording)
    s3fs.S3FileSystem.clear_instance_cache()
    server.terminate()
    server.wait()


@pytest.fixture
def bucket(moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> str:
    for name, value in {
        "AWS_ENDPOINT_URL": moto.url,
        "AWS_ACCESS_KEY_ID": "AKIDDELTATEST",
        "AWS_SECRET_ACCESS_KEY": "delta-test-secret",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }.items():
        monkeypatch.setenv(name, value)
    s3fs.S3FileSystem.clear_instance_cache()
    name = f"tables-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto.url).create_bucket(Bucket=name)
    return f"s3://{name}"


def always() -> bool:
    return True


@pytest.mark.parametrize("kill", list(KILL_POINTS))
def test_a_kill_at_each_publish_step_on_s3_then_a_retry_commits_once(
    bucket: str, monkeypatch: pytest.MonkeyPatch, kill: str
) -> None:
    spec = spec_for(bucket)

    def one_try() -> JobSummary:
        return publish_try(staged(spec, enriched(range(10)), dead(range(2))), 12, always)

    retry = killed_then_retried(monkeypatch, KILL_POINTS[kill], one_try)
    zombie = one_try()
    assert retry.table is not None and zombie.table is not None
    assert not zombie.table.data.committed and not zombie.table.dead_letters.committed
    assert ids_in(spec.output) == [f"k{i:03d}" for i in range(10)]
    assert ids_in(dead_letter_table(spec.output)) == ["d000", "d001"]
    assert len(run_commits(spec.output)) == 1 == len(run_commits(dead_letter_table(spec.output)))


def test_replace_merge_and_inline_dead_letters_on_s3(bucket: str) -> None:
    """A day replaced by its re-run, then merged by key with inline dead letters: only
    the enriched and outcome columns of present keys change."""
    spec = spec_for(bucket, write_mode="replace-interval", dead_letter_layout="inline")
    inline = [
        {**row, "_status": "enriched", "_error": "", "_attempts": "1"} for row in enriched(range(4))
    ]
    publish_try(staged(spec, inline, []), 4, always)
    store = SnapshotStore(spec.snapshot_dir)
    store.discard(KEY)  # a Clear: a new publish of the day
    again = [
        {**row, "_status": "enriched", "_error": "", "_attempts": "1"}
        for row in enriched(range(2), "r")
    ]
    publish_try(staged(spec, again, []), 2, always)
    assert ids_in(spec.output) == ["k000", "k001"]
    store.discard(KEY)
    merged = spec_for(bucket, write_mode="merge", dead_letter_layout="inline")
    update = [
        {**row, "_status": "dead_letter", "_error": "ServerError: 500", "_attempts": "5"}
        for row in enriched(range(1, 3), "m", "9")
    ]
    publish_try(staged(merged, update, []), 2, always)
    rows = pl.read_delta(spec.output).sort("id").select("id", "amount", "name", "_status").rows()
    assert rows == [
        ("k000", "1", "r0", "enriched"),
        ("k001", "1", "m1", "dead_letter"),
        ("k002", "9", "m2", "dead_letter"),
    ]
    assert len(run_commits(spec.output)) == 3


def test_a_publish_costs_the_same_requests_whatever_the_number_of_files(
    bucket: str, moto: MotoServer
) -> None:
    """The same publish into two tables at the same version, from a run of 3 files and
    one of 60: the publish step (both tables' commits, the namespace's record, the
    summary) serves the same requests."""
    counts = {}
    for files in (3, 60):
        spec = spec_for(bucket, output=f"{bucket}/customers-{files}")
        publish_try(staged(spec, enriched(range(120)), dead(range(2)), files=files), 122, always)
        SnapshotStore(spec.snapshot_dir).discard(KEY)  # the next day's, or a Clear's
        run = staged(spec, enriched(range(120)), dead(range(2)), files=files)
        moto.reset()
        publish_try(run, 122, always)
        counts[files] = moto.requests()
        print(f"publish of {files} files into a table at version 0: {dict(counts[files])}")
    assert counts[3] == counts[60]


ICEBERG_KILL_POINTS = {
    "commit sent": lambda mp: die_before(mp, iceberg_publish, "_commit"),
    "one of two tables committed": lambda mp: die_after(mp, iceberg_publish, "_commit"),
    "commit answered": lambda mp: die_before(mp, table_publish, "write_summary"),
}


@pytest.mark.parametrize("kill", list(ICEBERG_KILL_POINTS))
def test_an_iceberg_table_on_s3_is_committed_once_after_a_kill(
    bucket: str, moto: MotoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kill: str
) -> None:
    """pyiceberg's SQL catalog (SQLite, local) over a table whose files are on S3."""
    catalog = {
        "type": "sql",
        "uri": f"sqlite:///{tmp_path}/catalog.db",
        "s3.endpoint": moto.url,
        "s3.region": "us-east-1",
    }
    spec = spec_for(bucket, output_format="iceberg", iceberg_catalog=catalog)
    rows = [{**row, "interval_start": DAY} for row in enriched(range(10))]
    failed = [{**row, "interval_start": DAY} for row in dead(range(2))]

    def one_try() -> JobSummary:
        return publish_try(staged(spec, rows, failed), 12, always)

    killed_then_retried(monkeypatch, ICEBERG_KILL_POINTS[kill], one_try)
    zombie = one_try()
    assert zombie.table is not None and not zombie.table.data.committed
    loaded = load_catalog("enrichment", **catalog).load_table("enrichment.customers")
    assert sorted(loaded.scan().to_arrow()["id"].to_pylist()) == [f"k{i:03d}" for i in range(10)]
    identities = [s.summary.get(iceberg_publish.IDENTITY) for s in loaded.snapshots()]
    assert identities == [f"dag/enrich/{DAY}@1"]


def iceberg_publish_requests(
    bucket: str, moto: MotoServer, catalog: dict[str, str], files: int, counted: bool
) -> Counter[str]:
    """The requests of one Iceberg publish of ``files`` files into a table at version 1
    (a first run's publish made it), counted (``TaskRows``) or not."""
    rows = [{**row, "interval_start": DAY} for row in enriched(range(120))]
    failed = [{**row, "interval_start": DAY} for row in dead(range(2))]
    output = f"{bucket}/iceberg-{files}-{counted}"
    spec = spec_for(bucket, output=output, output_format="iceberg", iceberg_catalog=catalog)
    publish_try(staged(spec, rows, failed, files=files, counted=counted), 122, always)
    SnapshotStore(spec.snapshot_dir).discard(KEY)  # the next day's, or a Clear's
    run = staged(spec, rows, failed, files=files, counted=counted)
    moto.reset()
    publish_try(run, 122, always)
    counts = moto.requests()
    print(f"iceberg publish of {files} files, counted {counted}: {dict(counts)}")
    return counts


def sql_catalog(moto: MotoServer, folder: Path) -> dict[str, str]:
    return {
        "type": "sql",
        "uri": f"sqlite:///{folder}/catalog.db",
        "s3.endpoint": moto.url,
        "s3.region": "us-east-1",
    }


def test_an_iceberg_publish_costs_the_same_requests_whatever_the_number_of_files(
    bucket: str, moto: MotoServer, tmp_path: Path
) -> None:
    """The manifest entries come from the run folder's listing and the rows the write
    counted: 3 files or 60, the publish serves the same requests."""
    catalog = sql_catalog(moto, tmp_path)
    few, many = (iceberg_publish_requests(bucket, moto, catalog, n, True) for n in (3, 60))
    assert many == few


def test_an_iceberg_publish_without_counts_reads_each_files_footer(
    bucket: str, moto: MotoServer, tmp_path: Path
) -> None:
    """Files the write did not count (``maxRecordsPerFile`` split a task's rows) are
    added by pyiceberg's ``add_files``, which reads every footer: three requests a file
    (two HEADs and a GET), measured here so that a change shows."""
    catalog = sql_catalog(moto, tmp_path)
    few, many = (iceberg_publish_requests(bucket, moto, catalog, n, False) for n in (3, 60))
    growth = {kind: many[kind] - few[kind] for kind in many}
    assert growth == {"GET": 57, "HEAD": 114, "PUT": 0, "LIST": 0, "POST": 0}
