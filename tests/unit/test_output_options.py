"""The output's options, refused before Spark starts when they are bad or do not fit the
format: table options on a Parquet output, a secret among catalog properties, a bad
interval column or table identifier, a dead-letter retry of a table. Parquet stays the
default."""

from __future__ import annotations

import pytest

from spark_jobs.spec.job_cli import parse_args
from spark_jobs.spec.job_spec import JobSpec
from spark_jobs.spec.spec_error import SpecError

API = ["--url-template", "http://api/c/{id}", "--response-field", "name=$.name"]


def args(tmp_path, *extra: str) -> list[str]:
    return [
        *("--input", str(tmp_path / "in"), "--output", str(tmp_path / "out")),
        *("--key-column", "id", "--snapshot-dir", str(tmp_path / "snap"), *API, *extra),
    ]


def test_parquet_is_the_default_output(tmp_path):
    spec = parse_args(args(tmp_path))
    assert (spec.output_format, spec.write_mode, spec.dead_letter_layout) == (
        "parquet",
        "append",
        "table",
    )


def test_a_delta_output_takes_the_write_mode_and_dead_letter_layout(tmp_path):
    flags = ["--output-format", "delta", "--write-mode", "merge", "--dead-letter-layout", "inline"]
    spec = parse_args(args(tmp_path, *flags, "--interval-column", "day"))
    assert (spec.output_format, spec.write_mode, spec.dead_letter_layout) == (
        "delta",
        "merge",
        "inline",
    )
    assert spec.interval_column == "day"
    assert JobSpec.from_json(spec.to_json()) == spec, "executors get the same spec"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--write-mode", "merge"],
            "--write-mode: applies to a table output (--output-format delta or iceberg)",
        ),
        (
            ["--dead-letter-layout", "inline"],
            "--dead-letter-layout: applies to a table output (--output-format delta or iceberg)",
        ),
        (
            ["--output-format", "iceberg", "--iceberg-table", "customers"],
            "--iceberg-table: must be namespace.table (letters, digits, _), got 'customers'",
        ),
        (
            ["--output-format", "iceberg", "--iceberg-catalog", "type"],
            "--iceberg-catalog: expected KEY=VALUE (e.g. type=rest)",
        ),
        (
            ["--output-format", "delta", "--interval-column", "day of year"],
            "--interval-column: must be a column name (letters, digits, _), got 'day of year'",
        ),
        (
            ["--output-format", "delta", "--interval-column", "_status"],
            "--interval-column: must be a column name",
        ),
        (
            ["--output-format", "delta", "--retry-dead-letters", "all"],
            "--retry-dead-letters: reads the dead letters of a Parquet output; not with "
            "--output-format delta",
        ),
    ],
)
def test_output_options_that_do_not_fit_are_refused_naming_the_option(tmp_path, flags, message):
    with pytest.raises(SpecError) as refused:
        parse_args(args(tmp_path, *flags))
    assert str(refused.value).startswith(message)


def test_an_iceberg_catalog_is_its_pyiceberg_properties_flags_over_the_spec_file(tmp_path):
    spec_file = tmp_path / "job.json"
    spec_file.write_text('{"iceberg_catalog": {"type": "rest", "uri": "http://old"}}')
    flags = ["--output-format", "iceberg", "--iceberg-catalog", "uri=http://catalog:8181"]
    spec = parse_args(args(tmp_path, "--spec", str(spec_file), *flags, "--iceberg-table", "a.b"))
    assert spec.iceberg_catalog == {"type": "rest", "uri": "http://catalog:8181"}
    assert spec.iceberg_table == "a.b"


@pytest.mark.parametrize(
    ("catalog_property", "variable"),
    [
        ("token=s3cr3t-value", "PYICEBERG_CATALOG__ENRICHMENT__TOKEN"),
        (
            "s3.secret-access-key=s3cr3t-value",
            "PYICEBERG_CATALOG__ENRICHMENT__S3__SECRET_ACCESS_KEY",
        ),
        ("uri=postgresql://me:s3cr3t-value@db/catalog", "PYICEBERG_CATALOG__ENRICHMENT__URI"),
    ],
)
def test_a_secret_among_the_catalog_properties_is_refused_unshown(
    tmp_path, catalog_property, variable
):
    flags = ["--output-format", "iceberg", "--iceberg-catalog", catalog_property]
    with pytest.raises(SpecError) as refused:
        parse_args(args(tmp_path, *flags))
    assert f"holds a secret: set it in the environment variable {variable}" in str(refused.value)
    assert "s3cr3t-value" not in str(refused.value)


def test_a_spec_file_with_an_unknown_write_mode_is_refused(tmp_path):
    spec_file = tmp_path / "job.json"
    spec_file.write_text('{"output_format": "delta", "write_mode": "upsert"}')
    with pytest.raises(SpecError, match="--write-mode: must be one of append, replace-interval"):
        parse_args(args(tmp_path, "--spec", str(spec_file)))
