"""What users write on the same Spark in an afternoon instead of this job.

``python -m benchmarks.peers.spark_peers --engine E --url U --capacity C --input I
--output O`` runs one of them on ``local[2]`` with 2 partitions and writes the same
output the job does (the input columns and ``name``, ``city``, ``score``) as Parquet:

- ``recipe``: ``mapInArrow`` with one aiohttp session per task and a semaphore of ``C``
  over each Arrow batch (``asyncio.gather``), on asyncio's default event loop;
- ``arrow_udf``: a ``useArrow=True`` Python UDF calling ``requests``, with
  ``spark.sql.execution.pythonUDF.arrow.concurrency.level = C`` (Spark 4.0+ then runs
  each batch's calls on a pool of ``C`` threads);
- ``thread_pool``: ``rdd.mapPartitions`` with a ``ThreadPoolExecutor`` of ``C`` threads
  calling ``requests``, fed in slices of 10 000 rows.

No snapshots, no retries, no dead letters, no ordering: that is the point of comparing.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from itertools import islice
from typing import Any

import pyarrow as pa

from benchmarks.peers.fields import get_sync, item_url, pick

OUTPUT = pa.schema(
    [
        ("id", pa.string()),
        ("amount", pa.int64()),
        ("name", pa.string()),
        ("city", pa.string()),
        ("score", pa.float64()),
    ]
)


def spark_session(capacity: int) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return (
        SparkSession.builder.master("local[2]")
        .appName("bench-peers")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.execution.pythonUDF.arrow.concurrency.level", str(capacity))
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )


def recipe(frame: Any, base_url: str, capacity: int) -> Any:
    def enrich(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import asyncio

        import aiohttp

        async def one(session: aiohttp.ClientSession, semaphore: Any, key: str) -> Any:
            async with semaphore:
                async with session.get(item_url(base_url, key)) as response:
                    response.raise_for_status()
                    return pick(await response.json())

        async def all_of(session: aiohttp.ClientSession, semaphore: Any, keys: list) -> list:
            return await asyncio.gather(*(one(session, semaphore, k) for k in keys))

        async def open_session() -> aiohttp.ClientSession:
            connector = aiohttp.TCPConnector(limit=capacity, limit_per_host=capacity)
            return aiohttp.ClientSession(connector=connector)

        loop = asyncio.new_event_loop()
        session = loop.run_until_complete(open_session())
        semaphore = asyncio.Semaphore(capacity)
        try:
            for batch in batches:
                keys = batch.column("id").to_pylist()
                answers = loop.run_until_complete(all_of(session, semaphore, keys))
                names, cities, scores = zip(*answers, strict=True)
                yield pa.RecordBatch.from_arrays(
                    [*batch.columns, pa.array(names), pa.array(cities), pa.array(scores)],
                    schema=OUTPUT,
                )
        finally:
            loop.run_until_complete(session.close())
            loop.close()

    from pyspark.sql.pandas.types import from_arrow_schema

    return frame.mapInArrow(enrich, from_arrow_schema(OUTPUT))


def arrow_udf(frame: Any, base_url: str, capacity: int) -> Any:
    from pyspark.sql import functions as F

    @F.udf(returnType="struct<name:string,city:string,score:double>", useArrow=True)
    def call(key: str) -> tuple[str, str, float]:
        return get_sync(base_url, key, capacity)

    return frame.withColumn("r", call("id")).select("id", "amount", "r.*")


def thread_pool(frame: Any, base_url: str, capacity: int) -> Any:
    def enrich(rows: Iterator[Any]) -> Iterator[tuple[Any, ...]]:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=capacity) as pool:
            while chunk := list(islice(rows, 10_000)):
                answers = pool.map(lambda row: get_sync(base_url, row.id, capacity), chunk)
                for row, answer in zip(chunk, answers, strict=True):
                    yield (row.id, row.amount, *answer)

    from pyspark.sql.pandas.types import from_arrow_schema

    return frame.rdd.mapPartitions(enrich).toDF(from_arrow_schema(OUTPUT))


ENGINES = {"recipe": recipe, "arrow_udf": arrow_udf, "thread_pool": thread_pool}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers.spark_peers")
    parser.add_argument("--engine", choices=sorted(ENGINES), required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--capacity", type=int, required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    spark = spark_session(args.capacity)
    try:
        frame = spark.read.parquet(args.input).repartition(2)
        enriched = ENGINES[args.engine](frame, args.url, args.capacity)
        enriched.write.mode("overwrite").parquet(args.output)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
