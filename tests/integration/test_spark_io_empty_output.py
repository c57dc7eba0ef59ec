"""An output without rows (``dead_letters/`` of a run with none) written without a Spark
job: Spark, pyarrow and a later Spark append read it as they read Spark's own."""

import datetime

import pyarrow.parquet as pq
import pytest

from spark_jobs.driver.spark_io import write_empty_parquet

pytestmark = pytest.mark.spark

SCHEMA = (
    "id string not null, n long, small int, score double, ok boolean, day date, raw binary, "
    "f float, tags array<string>, source struct<name: string, rank: long>, error string, "
    "attempts long"
)


def test_an_empty_output_reads_as_sparks_own(spark, tmp_path):
    from pyspark.sql.types import StructType

    schema = StructType.fromDDL(SCHEMA)
    ours, sparks = str(tmp_path / "ours"), str(tmp_path / "sparks")
    assert write_empty_parquet(ours, schema)
    spark.createDataFrame([], schema).write.parquet(sparks)
    assert spark.read.parquet(ours).schema == spark.read.parquet(sparks).schema
    assert spark.read.parquet(ours).count() == 0
    table, theirs = pq.read_table(ours), pq.read_table(sparks)
    assert table.num_rows == 0 and table.schema.remove_metadata() == theirs.schema.remove_metadata()
    assert sorted(p.name for p in (tmp_path / "ours").iterdir())[0] == "_SUCCESS"


def test_spark_appends_to_an_empty_output(spark, tmp_path):
    from pyspark.sql.types import StructType

    schema = StructType.fromDDL(SCHEMA)
    out = str(tmp_path / "dead_letters")
    assert write_empty_parquet(out, schema)
    row = ("k1", 1, 2, 0.5, True, datetime.date(2026, 1, 1), b"x", 1.5, ["a"], ("s", 3), "e", 1)
    spark.createDataFrame([row], schema).write.mode("append").parquet(out)
    assert [r["id"] for r in spark.read.parquet(out).collect()] == ["k1"]
    assert pq.read_table(out).num_rows == 1


@pytest.mark.parametrize("column", ["at timestamp", "price decimal(10, 2)", "m map<string, int>"])
def test_types_whose_parquet_form_spark_chooses_are_left_to_spark(tmp_path, column):
    from pyspark.sql.types import StructType

    assert not write_empty_parquet(
        str(tmp_path / "out"), StructType.fromDDL(f"id string, {column}")
    )
    assert not (tmp_path / "out").exists()
