"""Options that name a run and where it writes, refused before any data moves: ``--run-id``
as one safe path component, ``--lease-ttl`` finite and bounded, and an output that
overlaps the input, the snapshot root or the cache directory."""

from __future__ import annotations

import re

import pytest

from spark_jobs.snapshots.lease import MAX_TTL_S
from spark_jobs.spec.job_cli import parse_args
from spark_jobs.spec.spec_error import SpecError

API = ["--url-template", "http://api/c/{id}", "--response-field", "name=$.name"]


def args(tmp_path, *extra, output="out", input_="in", snapshots="snap") -> list[str]:
    return [
        *("--input", str(tmp_path / input_), "--output", str(tmp_path / output)),
        *("--key-column", "id", "--snapshot-dir", str(tmp_path / snapshots), *API, *extra),
    ]


@pytest.mark.parametrize("run_id", ["../../x", "a/b", "..", "run\nforged line", "", "x" * 201])
def test_a_run_id_that_is_not_one_safe_path_component_is_refused(tmp_path, run_id):
    with pytest.raises(SpecError, match=r"^--run-id: must be a single path component"):
        parse_args(args(tmp_path, "--run-id", run_id))


def test_airflow_run_ids_are_accepted(tmp_path):
    run_id = "scheduled__2026-11-20T00:00:00+00:00.try2.a1b2c3"
    assert parse_args(args(tmp_path, "--run-id", run_id)).run_id == run_id


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--lease-ttl", "inf"], "--lease-ttl: must be a finite number of seconds > 0, got inf"),
        (["--lease-ttl", "nan"], "--lease-ttl: must be a finite number of seconds > 0, got nan"),
        (["--lease-ttl", "0"], "--lease-ttl: must be a finite number of seconds > 0"),
        (["--lease-ttl", "1e9"], f"--lease-ttl: must be at most {MAX_TTL_S:g} seconds"),
        (["--lease-wait", "inf"], "--lease-wait: must be a finite number of seconds >= 0"),
    ],
)
def test_the_lease_ttl_is_finite_and_bounded(tmp_path, flags, message):
    with pytest.raises(SpecError, match=re.escape(message)):
        parse_args(args(tmp_path, *flags))


@pytest.mark.parametrize(
    ("layout", "option"),
    [
        ({"output": "data", "input_": "data"}, "--input"),
        ({"output": "data", "input_": "data/day=1"}, "--input"),  # the input inside
        ({"output": "data/out", "input_": "data"}, "--input"),  # the output inside
        ({"output": "data", "input_": "data/*/part-*.json"}, "--input"),  # a glob inside
        ({"output": "snap/out"}, "--snapshot-dir"),
        ({"snapshots": "out/snapshots"}, "--snapshot-dir"),
    ],
)
def test_an_output_overlapping_the_input_or_the_snapshots_is_refused(tmp_path, layout, option):
    with pytest.raises(SpecError, match=rf"^--output .* overlaps {option} "):
        parse_args(args(tmp_path, **layout))


def test_an_output_overlapping_the_cache_is_refused_also_through_a_symlink(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "out")
    with pytest.raises(SpecError, match=r"overlaps --cache-dir "):
        parse_args(args(tmp_path, "--cache-dir", str(tmp_path / "link" / "cache")))
    with pytest.raises(SpecError, match=r"overlaps --input "):
        parse_args(args(tmp_path, input_="link"))


def test_separate_paths_and_mere_name_prefixes_are_accepted(tmp_path):
    spec = parse_args(args(tmp_path, "--cache-dir", str(tmp_path / "out-cache"), input_="outx"))
    assert spec.output.endswith("/out")
    s3 = ["--input", "s3://bucket/in", "--output", "s3://bucket/out", "--key-column", "id"]
    parse_args([*s3, "--snapshot-dir", "s3://other/out", *API])  # another bucket
    with pytest.raises(SpecError, match="overlaps --snapshot-dir"):
        parse_args([*s3, "--snapshot-dir", "s3://bucket/out/snap", *API])
