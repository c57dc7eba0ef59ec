"""What the input is, as options say it: reader options (refused ones named, flags over the
spec file, in the fingerprint only when they change parsing), composite keys, and the
line a malformed record starts on."""

from __future__ import annotations

import pytest

from spark_jobs.partition_runner.input_lines import describe_lines, record_lines
from spark_jobs.partition_runner.row_enrichment import SOURCE_FILE, row_problem
from spark_jobs.spec.input_options import reader_identity, reader_options
from spark_jobs.spec.job_cli import parse_args
from spark_jobs.spec.spec_error import SpecError

from .test_job_spec import REQUIRED


@pytest.mark.parametrize(
    ("option", "why"),
    [
        ("mode=DROPMALFORMED", "--input-option mode: refused: the job reads PERMISSIVE"),
        ("MODE=FAILFAST", "--input-option MODE: refused"),
        ("inferSchema=true", "--input-option inferSchema: refused: type inference rewrites"),
        ("columnNameOfCorruptRecord=bad", "--input-option columnNameOfCorruptRecord: refused"),
        ("ignoreCorruptFiles=true", "skip unreadable files"),
        ("sep", "--input-option: expected KEY=VALUE"),
    ],
)
def test_options_that_would_drop_or_alter_rows_are_refused_by_name(option, why):
    with pytest.raises(SpecError, match=why):
        parse_args([*REQUIRED, "--input-option", option])


def test_input_options_from_flags_win_over_the_spec_file_option_by_option(tmp_path):
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text("input_options: {sep: ';', header: false, encoding: latin1}\n")
    spec = parse_args([*REQUIRED, "--spec", str(spec_file), "--input-option", "sep=a=b"])
    assert spec.input_options == {"sep": "a=b", "header": "false", "encoding": "latin1"}
    refused = tmp_path / "refused.yaml"
    refused.write_text("input_options: {mode: DROPMALFORMED}\n")
    with pytest.raises(SpecError, match="--input-option mode: refused"):
        parse_args([*REQUIRED, "--spec", str(refused)])


def test_user_reader_options_override_the_jobs_case_insensitively():
    options = reader_options("csv", {"ESCAPE": "\\", "sep": ";"})
    assert options["ESCAPE"] == "\\" and "escape" not in options
    assert options["sep"] == ";" and options["multiLine"] == "true"
    assert options["mode"] == "PERMISSIVE" and options["columnNameOfCorruptRecord"]


def test_the_reader_is_part_of_the_fingerprint_only_where_it_changes_parsing():
    """JSON lines and Parquet read as always keep their fingerprint (snapshots resume);
    CSV, now read per RFC 4180, and any reader option change it."""
    assert reader_identity("jsonl", {}) is None and reader_identity("parquet", {}) is None
    csv = reader_identity("csv", {})
    assert csv is not None and csv["options"]["escape"] == '"'
    assert reader_identity("csv", {"nullValue": ""}) != csv
    assert reader_identity("jsonl", {"encoding": "latin1"}) is not None


@pytest.mark.parametrize("key", [["--key-column", "a,b"], ["--key-column", " a , b "]])
def test_a_composite_key_from_the_command_line(key):
    spec = parse_args([*REQUIRED, *key, "--url-template", "http://api/{a}/{b}"])
    assert spec.key_column == ["a", "b"] and spec.key_columns == ("a", "b")
    assert spec.http_config().key_field is None
    assert spec.enrichment_identity()["key_column"] == ["a", "b"]


def test_a_one_column_key_keeps_its_fingerprint_whether_written_as_text_or_list(tmp_path):
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text("key_column: [id]\n")
    listed = parse_args([*REQUIRED, "--spec", str(spec_file)])
    assert listed.key_column == "id"
    assert listed.enrichment_identity() == parse_args(REQUIRED).enrichment_identity()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--key-column", "a,a"], "--key-column: expected distinct non-empty column names"),
        (["--key-column", "a,"], "--key-column: expected distinct non-empty"),
        (
            ["--key-column", "a,b", "--spec", "BATCH"],
            "--key-column: batching sends one key, not several",
        ),
    ],
)
def test_bad_keys_are_refused_naming_the_option(tmp_path, flags, message):
    batch = tmp_path / "batch.yaml"
    batch.write_text("http: {batch_size: 10, batch_url_template: 'http://api/batch'}\n")
    args = [str(batch) if f == "BATCH" else f for f in flags]
    base = REQUIRED[:-4] if "BATCH" in flags else REQUIRED
    with pytest.raises(SpecError, match=message):
        parse_args([*base, *args, "--response-field", "name=$.name"])


def test_a_null_part_of_a_composite_key_is_named():
    spec = parse_args([*REQUIRED, "--key-column", "a,b", "--url-template", "http://api/{a}"])
    row = {"a": "x", "b": None, SOURCE_FILE: "file:///in/f.jsonl"}
    assert row_problem(row, spec) == "key column 'b' is null in file:///in/f.jsonl"
    assert row_problem({**row, "b": ""}, spec) is None


def test_a_malformed_record_is_found_on_the_line_it_starts(tmp_path):
    path = tmp_path / "in.csv"
    path.write_bytes(
        '\ufeffid,v\r\nr1,ok\r\nr2,"two\nlines",x\r\nr3,bad,extra\r\nr1,ok\r\nr3,bad,extra\r\n'.encode()
    )
    url = path.as_uri()
    assert record_lines(url, "r3,bad,extra") == (5, 7)
    assert record_lines(url, 'r2,"two\nlines",x') == (3,)
    assert record_lines(url, 'r2,"two\r\nlines",x,more') == (3,)  # first line alone
    assert record_lines(url, "id,v") == (1,)  # behind the BOM
    assert record_lines(url, "nowhere") == ()
    assert describe_lines((5, 7)) == "lines 5, 7" and describe_lines((3,)) == "line 3"
    assert "unknown line" in describe_lines(())
