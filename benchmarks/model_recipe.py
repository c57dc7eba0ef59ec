"""The hand-written model-endpoint recipe users write on open Spark: ``mapInArrow`` with one
aiohttp session per task and a semaphore of ``C`` over each Arrow batch, a JSON schema
sent as ``response_format``, and the retry every such recipe grows after its first 429:
wait ``Retry-After`` (1 s without one) and try again, at most ``ATTEMPTS`` times, then
keep the row with its error instead of failing the batch. No token pacing, no snapshots,
no resume: the comparison's point.

``python -m benchmarks.model_recipe --url U --input I --output O --capacity C``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

ATTEMPTS = 5
OUTPUT = pa.schema(
    [("id", pa.string()), ("title", pa.string()), ("answer", pa.string()), ("error", pa.string())]
)


def recipe(frame: Any, url: str, body: dict[str, Any], capacity: int) -> Any:
    def enrich(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import asyncio

        import aiohttp

        async def one(session: aiohttp.ClientSession, semaphore: Any, title: str) -> Any:
            request = json.loads(json.dumps(body).replace("{title}", title))
            async with semaphore:
                for _ in range(ATTEMPTS):
                    async with session.post(url, json=request) as response:
                        if response.status == 429:
                            wait = float(response.headers.get("Retry-After") or 1)
                        else:
                            response.raise_for_status()
                            answer = await response.json()
                            return answer["choices"][0]["message"]["content"], None
                    await asyncio.sleep(wait)
                return None, "429 after 5 attempts"

        async def all_of(session: aiohttp.ClientSession, titles: list) -> list:
            semaphore = asyncio.Semaphore(capacity)
            return await asyncio.gather(*(one(session, semaphore, t) for t in titles))

        async def run(batch: pa.RecordBatch) -> pa.RecordBatch:
            connector = aiohttp.TCPConnector(limit=capacity)
            async with aiohttp.ClientSession(connector=connector) as session:
                answers = await all_of(session, batch.column("title").to_pylist())
            texts, errors = zip(*answers, strict=True) if answers else ((), ())
            columns = [batch.column("id"), batch.column("title"), pa.array(texts, pa.string())]
            return pa.RecordBatch.from_arrays(
                [*columns, pa.array(errors, pa.string())], schema=OUTPUT
            )

        for batch in batches:
            yield asyncio.run(run(batch))

    from pyspark.sql.pandas.types import from_arrow_schema

    return frame.mapInArrow(enrich, from_arrow_schema(OUTPUT))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    for flag in ("--url", "--input", "--output", "--body"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--capacity", type=int, default=8)
    args = parser.parse_args(argv)
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-model-recipe")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    frame = spark.read.json(args.input).repartition(2, "id")
    body = json.loads(args.body)
    recipe(frame, args.url, body, args.capacity).write.mode("overwrite").parquet(args.output)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
