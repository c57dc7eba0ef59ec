"""The partition sizes the job counts before enriching are those of the partitions it
enriches: counted without the shuffle, they must follow Spark's hash partitioning row for
row, for every kind of key a real input holds."""

import pytest

from spark_jobs.enrichers import ResponseField
from spark_jobs.job_spec import JobSpec
from spark_jobs.spark_io import partition_deterministically, partition_sizes

pytestmark = pytest.mark.spark

HOSTILE = ["", " ", "ü", "é" * 40, "\x00", "a\nb", "🙂", "'; drop table x; --", "../..", None]


def spec(key_column: str, partitions: int) -> JobSpec:
    return JobSpec(
        input="unused",
        output="unused",
        key_column=key_column,
        snapshot_dir="unused",
        url_template="http://127.0.0.1/{" + key_column + "}",
        response_fields={"name": ResponseField("$.name", "string")},
        partitions=partitions,
    )


@pytest.mark.parametrize("partitions", [1, 3, 7])
@pytest.mark.parametrize("kind", ["string", "long", "double"])
def test_partition_sizes_are_the_sizes_of_the_partitions_enriched(spark, kind, partitions):
    from pyspark.sql import functions as F

    if kind == "string":
        keys = [f"k{i}" for i in range(500)] + HOSTILE
    elif kind == "long":
        keys = [*range(-250, 250), 2**62, -(2**62), None]
    else:
        keys = [i / 7 for i in range(500)] + [0.0, -0.0, float("nan"), float("inf"), None]
    frame = spark.createDataFrame([(k, i) for i, k in enumerate(keys)], f"key {kind}, n long")
    job = spec("key", partitions)

    partitioned = partition_deterministically(frame, job)
    actual = partitioned.groupBy(F.spark_partition_id().alias("p")).count().collect()

    assert partition_sizes(frame, job) == {row["p"]: row["count"] for row in actual}
    assert sum(partition_sizes(frame, job).values()) == len(keys)
