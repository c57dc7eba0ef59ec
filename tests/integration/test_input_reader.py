"""The input reader on real Spark: what an empty CSV cell becomes, with and without a
``nullValue`` option, and a BOM that stays out of the first column's name."""

from __future__ import annotations

import pytest

from spark_jobs.driver.input_reader import read_input
from spark_jobs.driver.spark_io import input_fingerprint
from spark_jobs.enrichers import ResponseField
from spark_jobs.spec.input_options import CORRUPT_RECORD
from spark_jobs.spec.job_spec import JobSpec

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


def test_input_files_named_with_spaces_and_percent_signs_are_fingerprinted(spark, tmp_path):
    """Spark names input files by percent-encoded URI (``%20``, ``%25``): the fingerprint
    stats the files themselves, as a run folder read back by ``--retry-dead-letters``
    (``...T00%3A00...``) and a user's ``my data/`` need."""
    folder = tmp_path / "my data" / "run%3A1"
    folder.mkdir(parents=True)
    (folder / "in 1.csv").write_text("id,text\n1,x\n")
    frame = read_input(spark, spec(folder))
    [(url, (size, mtime))] = input_fingerprint(frame).items()
    assert "%20" in url and "%253A" in url, url  # the URI as Spark gives it
    assert size == len("id,text\n1,x\n") and mtime
