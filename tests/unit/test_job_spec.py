"""The job spec: per-attempt deadlines derived from the record's timeout, HTTP flags from the
command line or the spec file, and errors that name the option."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from spark_jobs import defaults
from spark_jobs.enrichers import HttpEnricherConfig
from spark_jobs.spec.job_cli import build_parser, parse_args
from spark_jobs.spec.job_spec import JobSpec
from spark_jobs.spec.spec_error import SpecError

REQUIRED = [
    *("--input", "in", "--output", "out", "--key-column", "id", "--snapshot-dir", "snap"),
    *("--url-template", "http://api/c/{id}", "--response-field", "name=$.name"),
]


def test_attempt_deadlines_are_shares_of_the_record_timeout():
    config = parse_args([*REQUIRED, "--timeout", "20"]).http_config()
    assert config.total_timeout == pytest.approx(10)
    assert config.first_byte_timeout == pytest.approx(20 / 3)
    assert config.read_timeout == pytest.approx(2)
    assert config.connect_timeout == pytest.approx(20 / 6)


def test_explicit_deadlines_win_from_flags_and_from_a_spec_file(tmp_path):
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text("read_timeout: 0.5\nmax_response_bytes: 1000\nhedge_after: p95\n")
    config = parse_args(
        [*REQUIRED, "--spec", str(spec_file), "--read-timeout", "0.25", "--total-timeout", "4"]
    ).http_config()
    assert (config.read_timeout, config.total_timeout) == (0.25, 4)  # flags over the file
    assert config.max_response_bytes == 1000 and config.hedge_percentile == 95


def test_an_attempt_deadline_that_leaves_no_room_for_a_retry_is_refused():
    with pytest.raises(SpecError, match=r"total_timeout \(40s per attempt\).*--timeout \(30s"):
        parse_args([*REQUIRED, "--total-timeout", "40"])


def test_straggler_resends_are_off_unless_the_flag_or_the_spec_file_asks(tmp_path):
    assert parse_args(REQUIRED).http_config().resend_stragglers is False
    assert parse_args([*REQUIRED, "--resend-stragglers"]).http_config().resend_stragglers
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text("http:\n  resend_stragglers: true\n")
    assert parse_args([*REQUIRED, "--spec", str(spec_file)]).http_config().resend_stragglers


def test_straggler_resends_of_a_post_are_refused_naming_the_option():
    with pytest.raises(SpecError, match=r"http: resend_stragglers: only idempotent.*POST"):
        parse_args([*REQUIRED, "--method", "POST", "--resend-stragglers"])


@pytest.mark.parametrize(
    ("flags", "option"),
    [(["--hedge-after", "soon"], "hedge_after"), (["--max-response-bytes", "0"], "max_response")],
)
def test_bad_http_flags_name_the_option(flags, option):
    with pytest.raises(SpecError, match=option):
        parse_args([*REQUIRED, *flags])


def test_every_option_help_shows_the_default_the_job_uses():
    """The defaults are read from the fields, not restated (--outage-threshold's help once
    said 100 while the default was 50): each flag whose field has a fixed default shows
    exactly that value, and no help states any other default."""
    fields = {f.name: f.default for f in dataclasses.fields(JobSpec)}
    fields["max_response_bytes"] = HttpEnricherConfig.max_response_bytes
    fields["method"] = HttpEnricherConfig.method
    fields["follow_redirects"] = HttpEnricherConfig.follow_redirects
    helps = {a.dest: a.help for a in build_parser()._actions if a.help}
    shown = 0
    for dest, text in helps.items():
        stated = re.findall(r"\(default ([^):,]+)\)", text)
        default = fields.get(dest)
        if default is None or isinstance(default, bool) or default is dataclasses.MISSING:
            assert stated == [] or dest == "queue_capacity", f"{dest}: {text}"
            continue
        assert stated, f"--{dest} does not state its default {default!r}: {text}"
        value = f"{default:g}" if isinstance(default, float) else str(default)
        assert stated == [value], f"--{dest}: help says {stated}, the default is {value}"
        shown += 1
    assert shown >= 15  # the loop saw the options (19 today)
    assert "(default 50)" in helps["outage_threshold"]
    assert "(default 30)" in helps["timeout"] and "(default 5)" in helps["max_attempts"]


def test_help_defaults_match_the_help_text_printed():
    helps = {a.dest: a.help for a in build_parser()._actions if a.help}
    for dest in ("connect_timeout", "first_byte_timeout", "read_timeout", "total_timeout"):
        assert re.search(r"default: 1/\d+ of --timeout", helps[dest]), helps[dest]


def test_job_spec_defaults_are_the_shared_ones():
    """One source: the spec, the enricher config and the Airflow side read defaults.py."""
    spec = parse_args(REQUIRED)
    assert (spec.partitions, spec.capacity, spec.resume) == (
        defaults.PARTITIONS,
        defaults.CAPACITY,
        defaults.RESUME,
    )
    assert (spec.mode, spec.input_format, spec.cache_ttl) == (
        defaults.MODE,
        defaults.INPUT_FORMAT,
        defaults.CACHE_TTL,
    )
    assert spec.snapshot_interval == defaults.SNAPSHOT_INTERVAL_S
    assert HttpEnricherConfig.capacity == defaults.CAPACITY


@pytest.mark.parametrize(
    ("option", "value"),
    [("mode", "sorted"), ("resume", "maybe"), ("input_format", "xml")],
)
def test_choices_come_from_the_literal_types(option, value):
    with pytest.raises(SpecError, match=f"--{option.replace('_', '-')}: must be one of"):
        JobSpec.from_mapping(
            {**json.loads(parse_args(REQUIRED).to_json()), option: value}, source="test"
        )


def test_the_enrichment_identity_is_unchanged_by_the_field_markers():
    """The job fingerprint's input, as computed before the fields were marked (0300f7e)."""
    spec = parse_args(
        [
            *REQUIRED[:-2],
            *("--response-field", "name=$.name", "--response-field", "score=$.score:float"),
            *("--event-time-column", "t"),
        ]
    )
    assert spec.enrichment_identity() == {
        "event_time_column": "t",
        "http": "23d3353eb7e999c284af6a8e254a11d67653fe78d95e7e8d78ad756cfdd37acc",
        "key_column": "id",
        "partitions": 8,
        "response_fields": {"name": ["$.name", "string"], "score": ["$.score", "float"]},
    }


def test_the_docs_option_table_states_the_defaults_the_job_uses():
    """The job spec page's option table is the other place users read defaults."""
    from pathlib import Path

    from spark_jobs.spec.job_cli import option_defaults, shown

    page = (Path(__file__).resolve().parents[2] / "docs" / "job-spec.md").read_text()
    rows = re.findall(r"^\| `--([a-z-]+)[^|]*\| `([^`|]+)` \|", page, flags=re.M)
    fixed = option_defaults()
    checked = {
        flag: value for flag, value in rows if flag.replace("-", "_") in fixed and "/" not in value
    }
    assert len(checked) >= 12  # the rows were found (14 today)
    for flag, value in checked.items():
        assert value == shown(fixed[flag.replace("-", "_")]), f"docs/job-spec.md --{flag}: {value}"


def test_request_flags_reach_the_http_options_as_the_spec_file_writes_them(tmp_path):
    spec = parse_args(
        [
            *REQUIRED,
            *("--method", "post", "--body-template", '{"q": "{id}", "n": null}'),
            *("--header", "Accept=application/json", "--header", "X-Trace=a=b"),
            *("--secret-header", "X-Api-Key=CRM_KEY", "--spark-log-level", "INFO"),
        ]
    )
    config = spec.http_config()
    assert config.method == "POST" and config.body_template == {"q": "{id}", "n": None}
    assert config.headers == {"Accept": "application/json", "X-Trace": "a=b"}
    assert config.secret_headers == {"X-Api-Key": "CRM_KEY"} and spec.spark_log_level == "INFO"
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(
        'http:\n  method: POST\n  body_template: {q: "{id}"}\n'
        "  secret_headers: {X-Api-Key: CRM_KEY}\n"
    )
    from_file = parse_args([*REQUIRED, "--spec", str(spec_file)]).http_config()
    assert (from_file.method, from_file.secret_headers) == ("POST", config.secret_headers)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--header", "Accept"], "--header: expected NAME=VALUE, got 'Accept'"),
        (["--secret-header", "=CRM_KEY"], "--secret-header: expected NAME=VARIABLE"),
        (["--body-template", "{q: 1}"], "--body-template: not JSON"),
        (["--method", "POST", "--body-template", '"{id}"'], "must be a mapping"),
    ],
)
def test_bad_request_flags_name_the_flag(flags, message):
    with pytest.raises(SpecError, match=re.escape(message)):
        parse_args([*REQUIRED, *flags])


def test_redirects_are_followed_only_when_asked_by_flag_or_by_the_http_section(tmp_path):
    assert parse_args(REQUIRED).http_config().follow_redirects == "none"
    flag = parse_args([*REQUIRED, "--follow-redirects", "same-origin"]).http_config()
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text("http:\n  follow_redirects: same-origin\n")
    from_file = parse_args([*REQUIRED, "--spec", str(spec_file)]).http_config()
    assert flag.follow_redirects == from_file.follow_redirects == "same-origin"
    spec_file.write_text("http:\n  follow_redirects: always\n")
    with pytest.raises(SpecError, match="follow_redirects must be one of none, same-origin"):
        parse_args([*REQUIRED, "--spec", str(spec_file)])


MODEL_RUN = [
    *("--input", "in", "--output", "out", "--key-column", "id", "--snapshot-dir", "snap"),
    *("--url-template", "http://api/v1/chat/completions", "--method", "POST"),
    *("--model", json.dumps({"model": "m", "prompt": "{title}", "price_input_per_million": 1})),
]


def test_model_mode_switches_the_mode_not_the_fingerprint_and_holds_a_batch_per_partition():
    online, batch = parse_args(MODEL_RUN), parse_args([*MODEL_RUN, "--model-mode", "batch"])
    assert batch.enrichment_identity() == online.enrichment_identity()  # may switch, resume
    assert batch.operator_capacity == 10_000 and batch.operator_call_capacity is None
    assert online.operator_call_capacity == online.capacity


def test_a_batch_run_refuses_a_request_budget_and_a_mode_needs_a_model(tmp_path):
    with pytest.raises(SpecError, match="max-requests: counts calls"):
        parse_args([*MODEL_RUN, "--model-mode", "batch", "--max-requests", "5"])
    with pytest.raises(SpecError, match="model-mode: online or batch, for a model section"):
        parse_args([*REQUIRED, "--model-mode", "batch"])
    with pytest.raises(SpecError, match="coalesce must stay on in model batch mode"):
        (tmp_path / "spec.yaml").write_text("http:\n  coalesce: false\n")
        parse_args([*MODEL_RUN, "--model-mode", "batch", "--spec", str(tmp_path / "spec.yaml")])
