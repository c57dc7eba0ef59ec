"""A real Spark session runs a Python UDF and Arrow mapInArrow with this interpreter:
proof that the Python side, the jars and PYSPARK_PYTHON fit together."""

import sys

import pytest

pytestmark = pytest.mark.spark


def test_python_udf_and_map_in_arrow_run_on_local_spark(spark):
    from pyspark.sql import functions as F

    @F.udf("string")
    def interpreter(_):
        import sys as worker_sys

        return worker_sys.executable

    df = spark.range(4).repartition(2)
    assert {r[0] for r in df.select(interpreter("id")).collect()} == {sys.executable}

    def double(batches):
        import pyarrow as pa
        import pyarrow.compute as pc

        for batch in batches:
            yield pa.RecordBatch.from_arrays([pc.multiply(batch.column(0), 2)], names=["id"])

    doubled = sorted(r.id for r in df.mapInArrow(double, df.schema).collect())
    assert doubled == [0, 2, 4, 6]
