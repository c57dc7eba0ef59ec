"""The request budget's ledger on S3 semantics (a moto server on loopback): a claim is a
conditional PUT (``If-None-Match: *``), so racing claimers never share a chunk."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import boto3
import pytest
import s3fs
from moto.server import ThreadedMotoServer

from spark_jobs.snapshots.budget_ledger import BudgetLedger, create_exclusively


@pytest.fixture(scope="module")
def fs() -> Iterator[s3fs.S3FileSystem]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    keys = {"aws_access_key_id": "AKIDLEDGER", "aws_secret_access_key": "ledger-secret"}
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **keys).create_bucket(
        Bucket="ledger"
    )
    yield s3fs.S3FileSystem(
        key=keys["aws_access_key_id"],
        secret=keys["aws_secret_access_key"],
        client_kwargs={"endpoint_url": endpoint, "region_name": "us-east-1"},
        skip_instance_cache=True,
    )
    server.stop()


def test_a_second_create_of_the_same_object_loses(fs):
    directory = f"ledger/{uuid.uuid4().hex}"
    assert create_exclusively(fs, directory, "chunk-000000", b"first")
    assert not create_exclusively(fs, directory, "chunk-000000", b"second")
    assert fs.cat_file(f"{directory}/chunk-000000") == b"first"


def test_racing_claimers_on_s3_share_the_budget_without_overspending(fs):
    namespace = f"ledger/{uuid.uuid4().hex}"
    granted: list[int] = []
    start = threading.Barrier(6)

    def claimer(number: int) -> None:
        book = BudgetLedger(fs, namespace, "run-1", 100, 7)
        start.wait()
        while grant := book.claim(f"p{number}"):
            granted.append(grant)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(granted) == 100 and len(granted) == 15
