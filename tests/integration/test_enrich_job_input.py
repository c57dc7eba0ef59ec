"""The input read exactly, end to end: hostile CSV and JSON lines through the real job
(Spark local[2]) against a loopback API that echoes what it got. Every value in the output
and every value the API received is compared with what Python's ``csv``/``json`` modules
read from the same file; rows the reader cannot parse are dead letters naming file and
line. Also: a composite key, and placeholders checked against the schema before any call."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from spark_jobs.snapshots.store import JOB_RECORD

from .echo_api import EchoApi
from .job_support import read_output, run_job

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# Excel's way: CRLF ends a record, a line break inside a quoted value is LF.
CSV_LINES = [
    "\ufeffid,street,note,city",
    'r01,"Main St y=""2""",plain,Berlin',
    'r02,"multi\nline, with comma","say ""hi"", ok",Köln',
    'r03,,"",',
    'r04,"emoji 🙂🚀 👩‍👩‍👧","RTL שלום עליכם مرحبا بكم",東京',
    "r05, leading and trailing ,'single',\"semi;colon|pipe\ttab\"",
    'r06,"a,b,c","""quoted""",back\\slash',
    "r07,x,y,z,extra",
    "r08,only",
    'r09,"""","x\\y","\\"',
    'r.10/../?#%,"a ""b"" c\nd","",e',
    ',"no key: the empty string",x,y',
    'r13,"unterminated, to the end of the file',
]
MALFORMED_CSV = ("r07", "r08", "r13")
ECHOED = {"e_path": "$.path"}


def spec_file(tmp: Path, url: str, body: dict, fields: list[str], **extra) -> Path:
    """A spec file: POST the body template to ``url``, keep what the API echoes."""
    response = {f"e_{name}": f"$.got.{name}" for name in fields} | ECHOED
    spec = {
        "input": str(tmp / "in"),
        "output": str(tmp / "out"),
        "snapshot_dir": str(tmp / "snapshots"),
        "url_template": url,
        "response_fields": response,
        "http": {"method": "POST", "body_template": body},
        "partitions": 3,
        "snapshot_interval": 0.5,
        **extra,
    }
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True))
    return path


def line_of(lines: list[str], prefix: str) -> int:
    """The 1-based physical line where the record starting with ``prefix`` begins."""
    physical = 1
    for text in lines:
        if text.startswith(prefix):
            return physical
        physical += text.count("\n") + 1
    raise AssertionError(prefix)


def test_hostile_csv_is_read_exactly_and_a_malformed_row_names_its_line(tmp_path):
    source = tmp_path / "in" / "shipments.csv"
    source.parent.mkdir()
    source.write_bytes("\r\n".join(CSV_LINES).encode() + b"\r\n")
    with source.open(newline="", encoding="utf-8-sig") as file:
        reference = {row["id"]: row for row in csv.DictReader(file)}
    columns = ["id", "street", "note", "city"]
    expected = {k: {c: row[c] for c in columns} for k, row in reference.items()}
    for key in MALFORMED_CSV:
        del expected[key]
    body = {c: "{" + c + "}" for c in columns}
    spec = spec_file(tmp_path, "{api}/echo/{id}", body, columns, key_column="id")
    with EchoApi() as api:
        spec.write_text(spec.read_text().replace("{api}", api.url))
        code, log = run_job(["--spec", str(spec), "--input-format", "csv", "--keep-snapshots"])
        assert code == 0, log[-5000:]
        received = {call["got"]["id"]: call for call in api.calls}
        # A reader option that changes parsing changes what the input is.
        changed = ["--input-option", "nullValue=", "--resume", "require"]
        again, again_log = run_job(["--spec", str(spec), "--input-format", "csv", *changed])
        assert again == 3 and "input reader changed" in again_log, again_log[-3000:]
    data, dead, summary = read_output(tmp_path / "out")

    assert {row["id"]: {c: row[c] for c in columns} for row in data} == expected
    for row in data:  # what the API answered is what it received: the same values
        assert {c: row[f"e_{c}"] for c in columns} == expected[row["id"]]
        assert row["e_path"] == row["id"]
    assert {k: call["got"] for k, call in received.items()} == expected
    assert len(api.calls) == len(expected) == summary["enriched"]
    errors = {row["id"]: row["error"] for row in dead}
    assert sorted(errors) == sorted(MALFORMED_CSV) and summary["dead_letters"] == 3
    assert summary["records_in"] == len(CSV_LINES) - 1  # all but the header
    for key in MALFORMED_CSV:
        line = line_of(CSV_LINES, key + ",")
        assert f"malformed csv record in {source.as_uri()} line {line}: " in errors[key]


JSON_RECORDS = [
    {"id": "j1", "lang": "he", "text": 'שלום "quoted" \\ back', "n": 1, "flag": True, "x": 0.1},
    {"id": "j1", "lang": "ar", "text": "مرحبا\nnew line\ttab", "n": -2, "flag": False, "x": 1e-300},
    {
        "id": "j2",
        "lang": "en",
        "text": "emoji 🙂 \u0000 nul 😀",
        "n": 2**53 + 1,
        "flag": None,
        "x": -0.5,
    },
    {"id": "j2", "lang": "en", "text": "same key, other row", "n": 0, "flag": True, "x": 2.5},
    {"id": "j/3?", "lang": "%2F", "text": "", "n": None, "flag": True, "x": None},
    {"id": "j4", "lang": None, "text": "a null key part", "n": 4, "flag": True, "x": 4.0},
]


def test_hostile_json_lines_with_a_composite_key_are_read_exactly(tmp_path):
    lines = [json.dumps(r, ensure_ascii=i % 2 == 0) for i, r in enumerate(JSON_RECORDS)]
    lines.insert(3, '{"id": "j5", "lang": "en", "text": "unterminated}')
    source = tmp_path / "in" / "events.jsonl"
    source.parent.mkdir()
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    reference = [json.loads(line) for line in lines if not line.endswith("unterminated}")]
    columns = ["id", "lang", "text", "n", "flag", "x"]
    body = {c: "{" + c + "}" for c in columns}
    url = "{api}/echo/{id}/{lang}"
    spec = spec_file(tmp_path, url, body, ["text"], key_column="id,lang")
    with EchoApi() as api:
        spec.write_text(spec.read_text().replace("{api}", api.url))
        code, log = run_job(["--spec", str(spec)])
        assert code == 0, log[-5000:]
    data, dead, summary = read_output(tmp_path / "out")

    def canonical(rows):
        return sorted(json.dumps(r, sort_keys=True) for r in rows)

    enriched = [r for r in reference if r["lang"] is not None]
    assert canonical({c: row[c] for c in columns} for row in data) == canonical(enriched)
    assert canonical(call["got"] for call in api.calls) == canonical(enriched)
    for row in data:
        assert row["e_text"] == row["text"] and row["e_path"] == f"{row['id']}/{row['lang']}"
    errors = sorted(row["error"] for row in dead)
    assert len(errors) == 2 == summary["dead_letters"]
    assert f"malformed jsonl record in {source.as_uri()} line 4: " in errors[1]
    assert "key column 'lang' is null in " in errors[0]


@pytest.mark.parametrize(
    ("url", "body", "message"),
    [
        ("{api}/echo/{idd}", None, "--url-template: 'idd' not an input column"),
        ("{api}/echo/{id}", {"q": "{strete}"}, "http.body_template: 'strete' not an input"),
    ],
)
def test_a_placeholder_missing_from_the_input_fails_before_any_call(tmp_path, url, body, message):
    source = tmp_path / "in" / "rows.csv"
    source.parent.mkdir()
    source.write_text("id,street\n1,Main\n")
    spec = spec_file(tmp_path, url, body or {"id": "{id}"}, ["id"], key_column="id")
    with EchoApi() as api:
        spec.write_text(spec.read_text().replace("{api}", api.url))
        code, log = run_job(["--spec", str(spec), "--input-format", "csv"])
        assert api.calls == []
    assert code == 3, log[-3000:]
    assert message in log and "the input's columns: id, street" in log
    assert "Traceback" not in log
    assert not list((tmp_path / "snapshots").rglob(JOB_RECORD)), "no job record was written"
