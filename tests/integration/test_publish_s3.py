"""Publishing on S3 (moto's server on loopback, every request it serves counted): no object
is ever copied, one PUT switches the output, whatever the number of files a run wrote;
readers (pandas, pyarrow) find the result through the summary; a crash before the switch
and a fenced-off run leave the previous result current."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import s3fs
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server

from spark_jobs.driver.current_result import current_data_path, read_result
from spark_jobs.driver.publish import discard, publish, staging_for
from spark_jobs.records.summary import JobSummary

FILES = 100  # per kind: what a large run leaves; publishing must not grow with it


@dataclass
class CountingS3:
    """moto's S3 on loopback, recording what kind of request each one was."""

    url: str = ""
    kinds: Counter[str] = field(default_factory=Counter)

    def count(self, environ: dict[str, Any]) -> None:
        method, query = environ["REQUEST_METHOD"], environ.get("QUERY_STRING", "")
        bucket_only = environ["PATH_INFO"].strip("/").count("/") == 0
        if "HTTP_X_AMZ_COPY_SOURCE" in environ:  # CopyObject and UploadPartCopy
            self.kinds["COPY"] += 1
        elif method == "POST" and "delete" in query:
            self.kinds["DELETE"] += 1
        elif method == "GET" and bucket_only:
            self.kinds["LIST"] += 1
        else:
            self.kinds[method] += 1


@pytest.fixture(scope="module")
def server() -> Iterator[CountingS3]:
    counting = CountingS3()
    moto = DomainDispatcherApplication(create_backend_app)

    def app(environ, start_response):
        counting.count(environ)
        return moto(environ, start_response)

    httpd = make_server("127.0.0.1", 0, app, True, request_handler=MotoRequestHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    counting.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield counting
    httpd.shutdown()
    thread.join()


@pytest.fixture
def output(server: CountingS3, monkeypatch) -> str:
    """An output in a fresh bucket; the job's code finds S3 through the environment."""
    credentials = {"AWS_ACCESS_KEY_ID": "publish", "AWS_SECRET_ACCESS_KEY": "publish-secret"}
    for name, value in {**credentials, "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.url)
    s3fs.S3FileSystem.clear_instance_cache()
    boto3.client("s3", endpoint_url=server.url).create_bucket(Bucket="results")
    return "s3://results/out"


def write_run(output: str, run_id: str, rows: int, files: int = 4) -> str:
    staging = staging_for(output, run_id)
    fs = s3fs.S3FileSystem()
    for kind, count in (("data", rows), ("dead_letters", files)):
        ids = list(range(count))
        for part in range(files):
            chunk = ids[part::files]
            table = pa.table({"id": chunk, "run": [run_id] * len(chunk)})
            pq.write_table(table, f"{staging}/{kind}/part-{part:05d}.parquet", filesystem=fs)
    return staging


def summary(run_id: str, rows: int) -> JobSummary:
    return JobSummary(run_id=run_id, records_in=rows, enriched=rows, dead_letters=0)


def run(server: CountingS3, output: str, run_id: str, rows: int, files: int) -> Counter[str]:
    """Write a run, then publish it as the job does; the requests publishing made."""
    staging = write_run(output, run_id, rows, files)
    server.kinds.clear()
    publish(staging, output, summary(run_id, rows), lambda: True)
    discard(staging)
    return Counter(server.kinds)


def runs(output: str) -> list[str]:
    fs = s3fs.S3FileSystem()
    fs.invalidate_cache()
    return sorted(path.rsplit("/", 1)[-1].rsplit("-", 1)[0] for path in fs.ls(f"{output}/runs"))


def test_publishing_copies_nothing_and_costs_the_same_for_any_number_of_files(server, output):
    small = run(server, output, "a", rows=40, files=4)
    large = run(server, output, "b", rows=FILES * 2, files=FILES)
    replacing = run(server, output, "c", rows=FILES * 2, files=FILES)
    print(f"\npublish requests: first {dict(small)}, {FILES} files {dict(large)}, then")
    print(f"replacing {2 * FILES} files with {2 * FILES} others {dict(replacing)}")
    for requests in (small, large, replacing):
        assert requests["COPY"] == 0, "an object was copied"
        assert requests["PUT"] == 1, "one PUT (the summary) switches the output"
    assert sum(large.values()) == sum(small.values()), "the cost grew with the files"
    assert replacing["DELETE"] <= 2, "old runs go in bulk deletes, not one by one"
    assert runs(output) == ["b", "c"], "a went after the switch; b (just replaced) stays"
    assert read_result(output).summary["result"].startswith("runs/c-")


def test_readers_find_the_current_result_with_pandas_and_pyarrow(server, output):
    run(server, output, "first", rows=30, files=3)
    path = current_data_path(output)
    assert path.startswith("s3://results/out/runs/first-") and path.endswith("/data")
    pandas = pytest.importorskip("pandas")
    assert sorted(pandas.read_parquet(path)["id"]) == list(range(30))
    fs = s3fs.S3FileSystem()
    assert pq.read_table(path.removeprefix("s3://"), filesystem=fs).num_rows == 30


def test_a_crash_before_the_switch_and_a_fenced_run_leave_the_previous_result(server, output):
    run(server, output, "previous", rows=10, files=2)
    write_run(output, "crashed", 99)  # the driver died before switching
    assert read_result(output).summary["run_id"] == "previous"
    zombie = write_run(output, "zombie", 50)
    server.kinds.clear()
    with pytest.raises(Exception, match="fenced off"):
        publish(zombie, output, summary("zombie", 50), lambda: False)
    assert server.kinds["PUT"] == 0 and server.kinds["COPY"] == 0, "the zombie wrote nothing"
    discard(zombie)
    current = read_result(output)
    assert current.summary["run_id"] == "previous"
    assert (
        pq.read_table(current.data.removeprefix("s3://"), filesystem=s3fs.S3FileSystem())[
            "run"
        ].to_pylist()
        == ["previous"] * 10
    )
    assert run(server, output, "rerun", rows=20, files=2)["COPY"] == 0
    assert read_result(output).summary["run_id"] == "rerun"
    assert runs(output) == ["previous", "rerun"], "the crashed and fenced runs' folders went"
