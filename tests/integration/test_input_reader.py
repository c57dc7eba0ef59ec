"""The input reader on real Spark: what an empty CSV cell becomes, with and without a
``nullValue`` option, and a BOM that stays out of the first column's name."""

from __future__ import annotations

import pytest

from spark_jobs.enrichers import ResponseField
from spark_jobs.input_options import CORRUPT_RECORD
from spark_jobs.input_reader import read_input
from spark_jobs.job_spec import JobSpec

pytestmark = pytest.mark.spark


def spec(path, **options) -> JobSpec:
    return JobSpec(
        input=str(path),
        output="unused",
        key_column="id",
        snapshot_dir="unused",
        input_format="csv",
        input_options=options,
        url_template="http://127.0.0.1/{id}",
        response_fields={"name": ResponseField("$.name", "string")},
    )


@pytest.mark.parametrize(
    ("options", "empty"), [({}, ""), ({"nullValue": ""}, None)], ids=["default", "nullValue"]
)
def test_an_empty_csv_cell_quoted_or_not_is_the_empty_string_unless_nullvalue_is_set(
    spark, tmp_path, options, empty
):
    path = tmp_path / "in.csv"
    path.write_bytes('\ufeffid,bare,quoted,text\n1,,"",x\n'.encode())
    frame = read_input(spark, spec(path, **options))
    assert frame.columns[0] == "id"  # not "\ufeffid"
    row = frame.drop(CORRUPT_RECORD).collect()[0].asDict()
    assert {k: row[k] for k in ("id", "bare", "quoted", "text")} == {
        "id": "1",
        "bare": empty,
        "quoted": empty,
        "text": "x",
    }
