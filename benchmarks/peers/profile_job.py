"""Where one partition's time goes: the Python worker's code under cProfile, without Spark.

``python -m benchmarks.peers.profile_job [--records N] [--capacity C] [--delay-ms D]
[--gc-young-threshold N]``
runs :class:`PartitionRunner` exactly as the Python worker of ``mapInArrow`` does (Arrow
batches of 10 000 rows in, output batches out, HTTP enricher, snapshots every 10 s), on
one partition of ``N`` records (default 100 000: half of the 200 000-record run) against
``server.py``, and prints the functions with the most own time and the most cumulative
time. Spark's Arrow transfer is not in it: it is the same for every ``mapInArrow`` peer.
``--engine recipe`` runs the hand-written ``mapInArrow`` recipe's function on the same
batches instead, so the two compare in one process without Spark's noise.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import tempfile
import time
from functools import partial

import pyarrow as pa

from benchmarks.peers.run import api
from benchmarks.peers.spark_peers import recipe
from spark_jobs.enrichers import ResponseField
from spark_jobs.partition_runner import PartitionRunner, PartitionTask
from spark_jobs.partition_runner.row_enrichment import SOURCE_FILE
from spark_jobs.snapshots import NamespaceKey, SnapshotStore
from spark_jobs.spec.job_spec import JobSpec

SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("amount", pa.int64()),
        ("name", pa.string()),
        ("city", pa.string()),
        ("score", pa.float64()),
        ("_error", pa.string()),
        ("_attempts", pa.int64()),
    ]
)


def batches(records: int, *, source_file: bool = True) -> list[pa.RecordBatch]:
    """The input as the job's Python worker gets it (with the source file column) or as
    the recipe's does (``source_file=False``)."""
    out = []
    for start in range(0, records, 10_000):
        ids = range(start, min(records, start + 10_000))
        columns: dict[str, list[object]] = {"id": [f"k{i:08d}" for i in ids], "amount": list(ids)}
        if source_file:
            columns[SOURCE_FILE] = ["file:///in/part-00000.parquet"] * len(ids)
        out.append(pa.RecordBatch.from_pydict(columns))
    return out


class _MapInArrow:
    """Stands in for a DataFrame: hands back the function ``recipe`` gives mapInArrow."""

    def mapInArrow(self, fn: object, schema: object) -> object:
        return fn


def run_recipe(url: str, records: int, capacity: int) -> float:
    """The recipe's partition function on one partition of ``records``; seconds taken."""
    enrich = recipe(_MapInArrow(), url, capacity)
    inputs = batches(records, source_file=False)
    started = time.perf_counter()
    rows = sum(b.num_rows for b in enrich(iter(inputs)))
    elapsed = time.perf_counter() - started
    assert rows == records, (rows, records)
    return elapsed


def run_partition(
    url: str, records: int, capacity: int, snapshots: str, **spec_options: object
) -> float:
    spec = JobSpec(
        input="unused",
        output="unused",
        key_column="id",
        snapshot_dir=snapshots,
        url_template=url + "/items/{id}",
        response_fields={
            "name": ResponseField("$.name", "string"),
            "city": ResponseField("$.address.city", "string"),
            "score": ResponseField("$.score", "float"),
        },
        partitions=2,
        capacity=capacity,
        **spec_options,
    )
    store = SnapshotStore(snapshots).partition(NamespaceKey("d", "t", "i"), 0)
    runner = PartitionRunner(spec, store, SCHEMA)
    inputs = batches(records)
    started = time.perf_counter()
    rows = sum(b.num_rows for b in runner.run(inputs, PartitionTask(0, "a", records, "f")))
    elapsed = time.perf_counter() - started
    assert rows == records, (rows, records)
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers.profile_job")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--capacity", type=int, default=64)
    parser.add_argument("--delay-ms", type=float, default=2.0)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--no-profile", action="store_true", help="time it only")
    parser.add_argument("--engine", choices=("job", "recipe"), default="job")
    parser.add_argument("--gc-young-threshold", type=int, help="the job's option of that name")
    args = parser.parse_args(argv)
    with api(args.delay_ms) as server, tempfile.TemporaryDirectory() as tmp:
        if args.engine == "job":
            young = {"gc_young_threshold": args.gc_young_threshold}
            run = partial(run_partition, server.url, args.records, args.capacity, tmp, **young)
        else:
            run = partial(run_recipe, server.url, args.records, args.capacity)
        profile = cProfile.Profile(time.process_time)  # CPU: the machine is shared
        cpu = time.process_time()
        elapsed = run() if args.no_profile else profile.runcall(run)
        cpu = time.process_time() - cpu
    print(
        f"{args.engine}: {args.records} records in {elapsed:.2f} s "
        f"({args.records / elapsed:.0f}/s), "
        f"CPU {cpu:.2f} s ({cpu / args.records * 1000:.3f} s per 1 000 records)"
    )
    if not args.no_profile:
        for order in ("tottime", "cumulative"):
            text = io.StringIO()
            pstats.Stats(profile, stream=text).sort_stats(order).print_stats(args.top)
            print(text.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
