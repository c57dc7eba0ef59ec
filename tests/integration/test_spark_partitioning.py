"""The partition sizes the job counts before enriching are those of the partitions it
enriches: counted without the shuffle, they must follow Spark's hash partitioning row for
row, for every kind of key a real input holds."""

import dataclasses
from collections import Counter

import pytest

from spark_jobs.driver.spark_io import partition_deterministically, partition_sizes
from spark_jobs.enrichers import ResponseField
from spark_jobs.spec.job_spec import JobSpec

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


def partitions_of(frame, job) -> list[list[tuple]]:
    """Each partition's rows, in the order the partition runner would see them."""
    rows = partition_deterministically(frame, job).rdd.glom().collect()
    return [[tuple(row) for row in part] for part in rows]


def test_a_composite_key_partitions_the_same_rows_in_the_same_order_however_read(spark):
    """Keys repeat (non-unique and hostile): the partitions hold the same rows in the same
    order whatever order and split the input comes in, and their sizes are counted by
    the same expression as the partitioning."""
    import random

    rows = [(f"r{i % 7}", HOSTILE[i % len(HOSTILE)], i % 3, f"v{i % 5}") for i in range(600)]
    job = dataclasses.replace(spec("a", 5), key_column=["a", "b"])
    shuffled = rows[:]
    random.Random(7).shuffle(shuffled)
    schema = "a string, b string, n long, v string"
    first = spark.createDataFrame(rows, schema).repartition(1)
    second = spark.createDataFrame(shuffled, schema).repartition(4)

    layout = partitions_of(first, job)
    assert layout == partitions_of(second, job)
    assert Counter(r for part in layout for r in part) == Counter(rows)
    for part in layout:  # sorted by the key columns, then every other column
        keys = [(r[0] is not None, r[0], r[1] is not None, r[1]) for r in part]
        assert keys == sorted(keys)
    assert partition_sizes(second, job) == {p: len(rows) for p, rows in enumerate(layout) if rows}


def test_a_one_column_key_partitions_as_before(spark):
    """The partition of a row under a one-column key is still pmod(hash(key)): existing
    snapshots resume with the same rows in their partitions."""
    from pyspark.sql import functions as F

    frame = spark.createDataFrame([(f"k{i}", i) for i in range(200)], "key string, n long")
    job = spec("key", 3)
    expected = frame.select("key", F.pmod(F.hash("key"), F.lit(3)).alias("p")).collect()
    layout = partitions_of(frame, job)
    assert {row["key"]: row["p"] for row in expected} == {
        r[0]: p for p, part in enumerate(layout) for r in part
    }
