"""Hostile large values against the snapshot's size limits, through the real partition
runner, writer and reader with a real API on loopback: a record whose values a commit
could not hold becomes a dead letter naming the limit, the partition goes on, and every
commit it wrote is one its reader accepts."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from spark_jobs.enrichers import ResponseField
from spark_jobs.partition_runner import PartitionRunner, PartitionTask, oversized
from spark_jobs.snapshots import NamespaceKey, SnapshotStore, commit_file, documents
from spark_jobs.spec.job_spec import JobSpec

from .echo_api import EchoApi

INPUT = pa.schema([("id", pa.string()), ("pad", pa.string())])
SCHEMA = pa.schema(
    [*INPUT, ("echoed", pa.string()), ("_error", pa.string()), ("_attempts", pa.int64())]
)
#: The header limit for this test: 512 KiB over a queue of 16 leaves 16 KiB per record.
LIMIT = 512 * 2**10
HOSTILE = {7, 8, 9, 30, 31}


def test_hostile_large_values_become_dead_letters_and_every_commit_stays_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in (documents, commit_file, oversized):
        monkeypatch.setattr(module, "MAX_DOCUMENT_BYTES", LIMIT)
    rows = [
        {"id": f"k{i:03d}", "pad": ("x" * 40_000) if i in HOSTILE else "small"} for i in range(60)
    ]
    with EchoApi() as api:
        job = JobSpec(
            input="unused",
            output="unused",
            key_column="id",
            snapshot_dir=str(tmp_path),
            url_template=api.url + "/echo/{id}",
            http={"method": "POST", "body_template": {"pad": "{pad}"}},
            response_fields={"echoed": ResponseField("$.got.pad")},
            partitions=1,
            capacity=4,  # a queue of 16 records
            snapshot_interval=0.01,
        )
        part = SnapshotStore(job.snapshot_dir).partition(NamespaceKey("d", "t", "i"), 0)
        batches = [
            pa.RecordBatch.from_pylist(rows[i : i + 10], schema=INPUT) for i in range(0, 60, 10)
        ]
        outputs = PartitionRunner(job, part, SCHEMA).run(
            batches, PartitionTask(0, "a1", 60, "fp", "r")
        )
        out = [row for batch in outputs for row in batch.to_pylist()]

    dead = {row["id"]: row["_error"] for row in out if row["_error"] is not None}
    assert set(dead) == {f"k{i:03d}" for i in HOSTILE}
    limit = LIMIT // (2 * 16)
    for error in dead.values():
        assert error.startswith("ValueTooLargeError: the enrichment values of this record")
        assert f"over the snapshot limit of {limit} bytes per record" in error
    enriched = [row for row in out if row["_error"] is None]
    assert len(enriched) == 55 and all(row["echoed"] == "small" for row in enriched)
    commits = sorted(Path(part.path, "commits").iterdir())
    assert len(commits) > 1
    final = part.latest()  # the reader accepts what the writer wrote
    assert final is not None and final.stats["finished"] is True
    assert (final.committed_rows, final.dead_letter_rows) == (55, 5)
