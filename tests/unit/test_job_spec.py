"""The job spec: per-attempt deadlines derived from the record's timeout, HTTP flags from the
command line or the spec file, and errors that name the option."""

from __future__ import annotations

import dataclasses

import pytest

from spark_jobs.job_spec import JobSpec, SpecError, build_parser, parse_args

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


@pytest.mark.parametrize(
    ("flags", "option"),
    [(["--hedge-after", "soon"], "hedge_after"), (["--max-response-bytes", "0"], "max_response")],
)
def test_bad_http_flags_name_the_option(flags, option):
    with pytest.raises(SpecError, match=option):
        parse_args([*REQUIRED, *flags])


def test_help_states_the_defaults_the_spec_uses():
    defaults = {f.name: f.default for f in dataclasses.fields(JobSpec)}
    helps = {a.dest: a.help for a in build_parser()._actions}
    assert f"default {defaults['outage_threshold']}," in helps["outage_threshold"]
    assert f"default {defaults['max_attempts']})" in helps["max_attempts"]
    assert f"default {defaults['timeout']:g})" in helps["timeout"]
