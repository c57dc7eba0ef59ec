"""The response cache across runs, through the real Spark job and a real API on loopback:
day 2 over the same keys pays nothing within the TTL, pays again after it, and damaged
cache files cost calls, never wrong values."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from demo.stack import demo_api

from .job_support import job_args, read_output, run_job, write_input

pytestmark = [pytest.mark.spark, pytest.mark.slow]

IDS = [f"k{i:04d}" for i in range(400)]


@pytest.fixture(autouse=True)
def cache_key(monkeypatch):
    """The demo API takes no token: the key that signs the cache is the deployment's."""
    monkeypatch.setenv("ENRICHMENT_CACHE_KEY", "a random key only this deployment knows")


def run_day(tmp: Path, day: str, api_url: str, *extra: str) -> tuple[list, dict]:
    work = tmp / day
    write_input(work / "in" / "part.jsonl", IDS)
    args = job_args(
        work,
        api_url,
        *("--partitions", "4", "--cache-dir", str(tmp / "cache"), "--interval-start", day),
        *("--cost-per-request", "0.01", *extra),
    )
    code, log = run_job(args)
    assert code == 0, log[-3000:]
    data, dead, summary = read_output(work / "out")
    assert not dead
    return sorted((r["id"], r["name"], r["score"]) for r in data), summary


def test_within_the_ttl_a_second_run_makes_no_calls_and_after_it_calls_again(tmp_path):
    with demo_api("--latency-ms", "5") as api:
        day1, summary1 = run_day(tmp_path, "day1", api.url, "--cache-ttl", "1h")
        assert api.calls_per_key() == Counter(IDS)
        day2, summary2 = run_day(tmp_path, "day2", api.url, "--cache-ttl", "1h")
        assert api.calls_per_key() == Counter(IDS), "day 2 called the API"
        # The entries are older than the next run's TTL when it starts (Spark alone
        # takes longer than that to start): every key is called again.
        day3, _ = run_day(tmp_path, "day3", api.url, "--cache-ttl", "0.5s")
        assert api.calls_per_key() == Counter({key: 2 for key in IDS})
    assert day1 == day2 == day3
    assert summary1["cost"]["requests_made"] == 400 and summary1["cost"]["estimated_cost"] == 4
    assert summary2["requests_made"] == 0
    assert summary2["cost"]["response_cache_hits"] == 400
    assert summary2["cost"]["estimated_cost"] == 0 and summary2["cost"]["estimated_saving"] == 4


def test_corrupt_or_deleted_cache_files_cost_calls_never_wrong_values(tmp_path):
    with demo_api("--latency-ms", "5") as api:
        day1, _ = run_day(tmp_path, "day1", api.url)
        # A partition writes a file at each snapshot cut that has new answers.
        parts = [
            sorted(p.glob("*.parquet"))
            for p in sorted((tmp_path / "cache").glob("scope-*/partitions=4/*"))
        ]
        for deleted in parts[0]:
            deleted.unlink()
        for torn in parts[1]:
            torn.write_bytes(torn.read_bytes()[:100])
        for tampered in parts[2]:
            table = pq.read_table(tampered)
            payloads = [b'{"name": "Mallory", "score": 0.5}'] * table.num_rows
            pq.write_table(table.set_column(2, "payload", [payloads]), tampered)
        kept = sum(pq.read_metadata(intact).num_rows for intact in parts[3])
        before = sum(api.calls_per_key().values())
        day2, summary2 = run_day(tmp_path, "day2", api.url)
        calls = sum(api.calls_per_key().values()) - before
    assert day2 == day1  # nothing from the damaged files was served
    assert calls == len(IDS) - kept == summary2["requests_made"]
    assert summary2["cost"]["response_cache_hits"] == kept


def test_without_a_key_or_an_api_secret_the_cache_is_refused_before_spark_starts(
    tmp_path, monkeypatch
):
    monkeypatch.delenv("ENRICHMENT_CACHE_KEY")
    write_input(tmp_path / "in" / "part.jsonl", IDS[:3])
    args = job_args(tmp_path, "http://127.0.0.1:9", "--cache-dir", str(tmp_path / "cache"))
    code, log = run_job(args)
    assert code == 2, log[-3000:]
    assert (
        "enrich_job: error: --cache-dir: cache_key_env: environment variable "
        "ENRICHMENT_CACHE_KEY is not set, and the API has no secret to derive a key from"
    ) in log
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()
