"""``make bench-scale``: the snapshot store alone (no API, no Spark) as k and P grow.

Drives one partition through k cuts the way the committer does (the attempt's record, the
lease check, the commit) on a local directory and on S3 (moto's server on loopback), both
through ``storage_requests.CountingFileSystem``, and reports:

* per cut: storage requests by type and bytes written, over the last 100 cuts before k
  and on average over all k (base cuts, compaction and pruning included);
* per resume of the partition at k: requests, metadata objects read, bytes read, seconds;
* per progress read of a namespace of P partitions: through its progress record (what
  every reader does), and by scanning one ``latest`` per partition (format 1's way, and
  the driver's fold over the partitions still running): requests, bytes and seconds;
* the projected S3 request cost of a run (formula in docs/performance.md).

Format 1 (a whole manifest per cut, re-listing ``segments/``; its writer replayed here
from the package's format-1 classes) is measured in the same run for k <= 1 000: it grows
with k^2. Results go to ``benchmarks/results/scale.json``; a Markdown table is printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks.storage_requests import CountingFileSystem
from spark_jobs.snapshots import Manifest, NamespaceLease
from spark_jobs.snapshots.compat.format1 import valid_manifests
from spark_jobs.snapshots.partition import PartitionSnapshots
from spark_jobs.snapshots.paths import MANIFESTS_DIR, manifest_name
from spark_jobs.snapshots.progress import MAX_RECORD_BYTES, PartitionEntry, ProgressRecord
from spark_jobs.snapshots.storage import list_entries, write_atomically
from spark_jobs.snapshots.store import PROGRESS_RECORD

RESULTS = Path(__file__).parent / "results" / "scale.json"
ROWS_PER_CUT = 50  # about a 10 s cut of a partition at 5 records/s
PENDING_PER_CUT = 16  # queued entries at the cut (the operator's capacity)
#: S3 Standard, us-east-1, per 1 000 requests: PUT/COPY/POST/LIST, GET/HEAD; DELETE is free.
PRICES = {"PUT": 0.005, "LIST": 0.005, "GET": 0.0004, "GET-range": 0.0004, "HEAD": 0.0004}


def cut_rows(number: int) -> pa.Table:
    ids = [f"k{number:07d}-{j:02d}" for j in range(ROWS_PER_CUT)]
    return pa.table({"id": ids, "value": [f"enriched value of {i}" * 4 for i in ids]})


def pending(number: int) -> list[dict[str, Any]]:
    return [{"record": number * 100 + j, "attempts": 1} for j in range(PENDING_PER_CUT)]


class Driver:
    """One partition, one attempt: cuts as the committer makes them, in format 1 or 2."""

    def __init__(self, fs: CountingFileSystem, root: str, fmt: int) -> None:
        namespace = f"{root}/{uuid.uuid4().hex[:8]}"
        self.fs, self.fmt = fs, fmt
        self.part = PartitionSnapshots(fs, f"{namespace}/part-00000", 0)
        self.lease = NamespaceLease(fs, namespace, "run", ttl_s=3600)
        self.lease.acquire(wait_s=0, poll_s=0)
        self.recorder = self.part.attempt_ledger().recorder(0, "a1", "run")
        self.writer = self.part.writer("a1")
        self.manifest: Manifest | None = None

    def check(self) -> None:
        if not self.lease.holds():
            raise RuntimeError("fenced off")

    def cut(self, number: int) -> None:
        self.recorder.write({"requests_made": number}, final=False)
        if self.manifest is None:
            nxt = Manifest("fp", 0, 0, number * ROWS_PER_CUT, "a1", pending=pending(number))
        else:
            nxt = self.manifest.advance(
                attempt="a1", input_offset=number * ROWS_PER_CUT, pending=pending(number)
            )
        if self.fmt == 2:
            self.manifest = self.writer.commit(nxt, [("results", cut_rows(number))], self.check)
        else:
            self.manifest = self._format1_commit(nxt, number)

    def _format1_commit(self, nxt: Manifest, number: int) -> Manifest:
        """The format-1 committer: check, segment, check, list segments/, whole manifest."""
        self.check()
        ref = self.part.write_segment(cut_rows(number), kind="results", attempt="a1")
        self.check()
        list_entries(self.fs, f"{self.part.path}/segments")
        committed = dataclasses.replace(
            nxt, segments=(*nxt.segments, ref), committed_at=datetime.now(UTC)
        )
        name = manifest_name(committed.epoch, "a1", uuid.uuid4().hex[:8])
        directory = f"{self.part.path}/{MANIFESTS_DIR}"
        write_atomically(self.fs, directory, name, committed.to_json_bytes())
        return committed

    def resume(self) -> dict[str, Any]:
        """A fresh reader's best snapshot and replay: requests, metadata reads, bytes, s."""
        since, started = len(self.fs.requests), time.perf_counter()
        if self.fmt == 2:
            manifest = self.part.latest()
        else:
            found, _ = valid_manifests(self.fs, self.part.path, 0, limit=1, verify_content=True)
            manifest = found[0][1]
        assert manifest is not None
        rows = sum(t.num_rows for _, t in self.part.read_segments(manifest))
        seconds = time.perf_counter() - started
        requests = self.fs.requests[since:]
        metadata = sum(1 for r in requests if r.kind == "GET" and "/segments/" not in r.path)
        return {
            "requests": dict(self.fs.count(since)),
            "metadata_objects_read": metadata,
            "bytes_read": self.fs.read(since),
            "rows_replayed": rows,
            "seconds": round(seconds, 3),
        }


def measure_partition(fs: CountingFileSystem, root: str, fmt: int, k: int) -> dict[str, Any]:
    driver = Driver(fs, root, fmt)
    start, window_start = len(fs.requests), None
    for number in range(1, k + 1):
        if number == max(1, k - 99):
            window_start = len(fs.requests)
        driver.cut(number)
    window = min(100, k)
    return {
        "format": fmt,
        "k": k,
        "per_cut_last_100": _per_cut(fs, window_start or start, window),
        "per_cut_all": _per_cut(fs, start, k),
        "resume": driver.resume(),
    }


def _per_cut(fs: CountingFileSystem, since: int, cuts: int) -> dict[str, Any]:
    counts = fs.count(since)
    return {
        "requests": round(sum(counts.values()) / cuts, 3),
        "by_type": {kind: round(n / cuts, 3) for kind, n in sorted(counts.items())},
        "bytes_written": round(fs.written(since) / cuts),
    }


def measure_progress(fs: CountingFileSystem, root: str, partitions: int) -> dict[str, Any]:
    """A namespace's progress over ``partitions`` partitions of one commit each, both ways:
    ``scan``, one listing then ``latest(verify_content=False)`` per partition (format 1's
    only way, and what the driver's fold does for the partitions still running); and
    ``record``, what every reader does now: one ranged GET of ``progress.json``, which the
    driver's ``ProgressFolder`` keeps current."""
    namespace = f"{root}/progress-{partitions}"
    parts = [PartitionSnapshots(fs, f"{namespace}/part-{n:05d}", n) for n in range(partitions)]
    for part in parts:
        part.commit(Manifest("fp", part.partition, 0, 1, "a1"))
    since, started = len(fs.requests), time.perf_counter()
    list_entries(fs, namespace)
    found = [part.latest(verify_content=False) for part in parts]
    assert all(m is not None for m in found)
    scan = {"requests": dict(fs.count(since)), "seconds": round(time.perf_counter() - started, 3)}
    return {"P": partitions, "scan": scan, "record": measure_record(fs, namespace, partitions)}


def measure_record(fs: CountingFileSystem, namespace: str, partitions: int) -> dict[str, Any]:
    """The progress record of ``partitions`` partitions: written once, then read as the
    Airflow reporter, the Storage tab and the page read it (requests, bytes, seconds)."""
    entries = tuple(
        PartitionEntry(
            partition=n, epoch=1, input_offset=10, records_total=10, committed_rows=10,
            dead_letter_rows=0, in_flight=0, watermark=None, committed_at_ms=0,
            attempt="a1", run_id="run", finished=True,
        )
        for n in range(partitions)
    )  # fmt: skip
    record = ProgressRecord("run", 0, partitions, 10 * partitions, entries)
    write_atomically(fs, namespace, PROGRESS_RECORD, record.to_json())
    since, started = len(fs.requests), time.perf_counter()
    data = fs.cat_file(f"{namespace}/{PROGRESS_RECORD}", start=0, end=MAX_RECORD_BYTES + 1)
    read = ProgressRecord.from_json(data)
    assert len(read.partitions) == partitions
    return {
        "requests": dict(fs.count(since)),
        "bytes": len(data),
        "seconds": round(time.perf_counter() - started, 3),
    }


def dollars_per_run(per_cut: dict[str, float], cuts: float) -> float:
    """Request cost of ``cuts`` cuts at ``per_cut`` requests by type (S3 Standard)."""
    return sum(cuts * n * PRICES.get(kind, 0.0) / 1000 for kind, n in per_cut.items())


@contextmanager
def storage(kind: str) -> Iterator[tuple[CountingFileSystem, str]]:
    """A counting filesystem over a temporary local directory or a bucket on moto's S3
    server on loopback, and the root path to use in it."""
    if kind == "local":
        with tempfile.TemporaryDirectory() as tmp:
            yield CountingFileSystem(), tmp
        return
    import s3fs
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        target = s3fs.S3FileSystem(
            key="bench",
            secret="bench",
            client_kwargs={"endpoint_url": f"http://{host}:{port}", "region_name": "us-east-1"},
        )
        target.call_s3("create_bucket", Bucket="scale")
        yield CountingFileSystem(target), "scale/snapshots"
    finally:
        server.stop()


def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"rows_per_cut": ROWS_PER_CUT, "pending_per_cut": PENDING_PER_CUT}
    for kind, ks, ps in (("local", args.k, args.p), ("s3", args.s3_k, args.s3_p)):
        rows, progress = [], []
        with storage(kind) as (fs, root):
            for k in ks:
                for fmt in (2, 1) if k <= args.format1_max_k else (2,):
                    rows.append(measure_partition(fs, root, fmt, k))
                    print(kind, _row(rows[-1]), flush=True)
            for partitions in ps:
                progress.append(measure_progress(fs, root, partitions))
                print(kind, "progress", progress[-1], flush=True)
        results[kind] = {"partitions": rows, "progress": progress}
    results["projection"] = projection(results, args.cuts_per_run)
    return results


def projection(results: dict[str, Any], cuts: float) -> dict[str, Any]:
    """Dollars of S3 requests per run at ``cuts`` cuts, from the local per-cut averages at
    the largest k measured per format."""
    out: dict[str, Any] = {"cuts_per_run": cuts, "prices_per_1000": PRICES}
    for fmt in (2, 1):
        rows = [r for r in results["local"]["partitions"] if r["format"] == fmt]
        if rows:
            row = max(rows, key=lambda r: r["k"])
            per_cut = row["per_cut_all"]["by_type"]
            out[f"format_{fmt}"] = {
                "at_k": row["k"],
                "dollars": round(dollars_per_run(per_cut, cuts)),
            }
    return out


def _row(row: dict[str, Any]) -> str:
    last, resume = row["per_cut_last_100"], row["resume"]
    return (
        f"| {row['format']} | {row['k']} | {last['requests']} | {last['bytes_written']} | "
        f"{row['per_cut_all']['requests']} | {resume['metadata_objects_read']} | "
        f"{sum(resume['requests'].values())} | {resume['bytes_read']} | {resume['seconds']} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--k", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--p", type=int, nargs="+", default=[10, 1000, 10000])
    parser.add_argument("--s3-k", type=int, nargs="*", default=[100, 1000])
    parser.add_argument("--s3-p", type=int, nargs="*", default=[10, 100])
    parser.add_argument("--format1-max-k", type=int, default=1000)
    parser.add_argument("--cuts-per-run", type=float, default=17.28e6)
    results = run(parser.parse_args())
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    print(
        "| format | k | requests/cut (last 100) | bytes/cut | requests/cut (all) |"
        " resume metadata reads | resume requests | resume bytes | resume s |"
    )
    for kind in ("local", "s3"):
        for row in results[kind]["partitions"]:
            print(kind, _row(row))
    print(json.dumps(results["projection"]))


if __name__ == "__main__":
    main()
