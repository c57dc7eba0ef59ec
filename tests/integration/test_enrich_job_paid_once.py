"""Nothing paid twice, nothing paid lost, through the real Spark job (local[2]) and the demo
API on loopback counting every call, on input that repeats its keys (2 000 records over
600 keys, the ratio of issue 22's 5 000 over 1 500): a budget stop or a SIGKILL, then a
resume, pays at most what an unbroken run pays plus the calls in flight; the response
cache a killed run wrote at its cuts answers the next run."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from demo.stack import demo_api
from spark_jobs.enrichers.request_keys import request_key
from spark_jobs.exit_status import ExitStatus

from .job_support import (
    committed_rows,
    job_args,
    kill_group,
    read_output,
    run_job,
    start_job,
    write_input,
)
from .test_enrich_job import KEY, committed

pytestmark = [pytest.mark.spark, pytest.mark.slow]

KEYS = 600
#: Each key's repeats spread through the input.
IDS = [f"k{(i * 7) % KEYS:05d}" for i in range(2_000)]
#: Slow enough calls (2 partitions x 4 in flight, 100 ms each) to kill a run mid-way.
SLOW_API = ("--latency-ms", "100")
OPTIONS = ("--partitions", "2", "--capacity", "4")


def settled_calls(api) -> Counter:
    api.settled_calls()  # the requests of a killed client still in the server counted
    return api.calls_per_key()


@pytest.fixture(scope="module")
def unbroken(tmp_path_factory) -> int:
    """The calls of one unbroken run over the input (each key once from a clean API)."""
    tmp = tmp_path_factory.mktemp("unbroken")
    write_input(tmp / "in" / "part.jsonl", IDS)
    with demo_api("--latency-ms", "5") as api:
        code, log = run_job(job_args(tmp, api.url, *OPTIONS))
        assert code == 0, log[-3000:]
        calls = settled_calls(api)
    assert calls == Counter(set(IDS))
    return sum(calls.values())


def committed_keys(snapshot_dir: Path) -> set[str]:
    """The keys whose results the namespace's snapshots hold (what a resume replays)."""
    return {r["id"] for r in committed_rows(snapshot_dir, KEY) if r["_error"] is None}


def kill_mid_way(args: list[str], snapshot_dir: Path, records: int) -> None:
    """Start the job and SIGKILL it (JVM and Python workers) once a third is committed."""
    job = start_job(args)
    deadline = time.monotonic() + 240
    while committed(snapshot_dir) < records / 3:
        assert job.poll() is None, job.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.1)
    kill_group(job)


def test_budget_stops_then_resume_pay_no_more_than_an_unbroken_run(tmp_path, unbroken):
    write_input(tmp_path / "in" / "part.jsonl", IDS)
    with demo_api("--latency-ms", "5") as api:
        args = job_args(tmp_path, api.url, *OPTIONS, "--max-requests", "350")
        stops = 0
        while (result := run_job(args))[0] == ExitStatus.BUDGET_SPENT:
            stops += 1
            assert stops < 10, result[1][-3000:]
        assert result[0] == 0, result[1][-3000:]
        calls = settled_calls(api)
    data, dead, _ = read_output(tmp_path / "out")
    assert Counter(r["id"] for r in data) == Counter(IDS) and not dead
    assert stops >= 1
    # A budget stop lets the calls in flight finish and commits them: none to pay again.
    assert sum(calls.values()) <= unbroken
    assert calls == Counter(set(IDS)), "a key paid twice"


def test_a_killed_run_then_resume_pays_again_only_for_what_it_had_not_committed(tmp_path, unbroken):
    write_input(tmp_path / "in" / "part.jsonl", IDS)
    with demo_api(*SLOW_API) as api:
        args = job_args(tmp_path, api.url, *OPTIONS)
        kill_mid_way(args, tmp_path / "snapshots", len(IDS))
        killed = settled_calls(api)
        kept = committed_keys(tmp_path / "snapshots")
        code, log = run_job(args)
        assert code == 0, log[-3000:]
        resumed = settled_calls(api) - killed
    data, dead, summary = read_output(tmp_path / "out")
    assert Counter(r["id"] for r in data) == Counter(IDS) and not dead
    assert summary["resumed"] is True
    assert kept and len(kept) < KEYS, "killed mid-way"
    assert not set(resumed) & kept, "a committed key was paid for again"
    in_flight = set(killed) - kept  # paid before the kill, not committed by it
    total = sum(killed.values()) + sum(resumed.values())
    print(
        f"\nunbroken {unbroken}, killed run {sum(killed.values())}, resumed run "
        f"{sum(resumed.values())}, in flight at the kill {len(in_flight)}"
    )
    assert total <= unbroken + len(in_flight)


def test_the_cache_a_killed_run_wrote_at_its_cuts_answers_the_next_run(tmp_path, monkeypatch):
    monkeypatch.setenv("ENRICHMENT_CACHE_KEY", "a random key only this deployment knows")
    ids = sorted(set(IDS))
    write_input(tmp_path / "in" / "part.jsonl", ids)
    cache = tmp_path / "cache"
    with demo_api(*SLOW_API) as api:
        args = job_args(tmp_path, api.url, *OPTIONS, "--cache-dir", str(cache))
        kill_mid_way(args, tmp_path / "snapshots", len(ids))
        killed = settled_calls(api)
        files = list(cache.rglob("*.parquet"))
        cached = {key for path in files for key in pq.read_table(path)["key"].to_pylist()}
        by_cache_key = {request_key("GET", f"{api.url}/customers/{i}", None): i for i in ids}
        # Another namespace (no snapshot to resume): only the cache can save calls.
        code, log = run_job([*args, "--interval-start", "next"])
        assert code == 0, log[-3000:]
        fresh = settled_calls(api) - killed
    _, _, summary = read_output(tmp_path / "out")
    assert len(files) > 2, "written at the cuts (two partitions, several cuts each)"
    assert cached and len(cached) < len(ids), "killed mid-way"
    assert summary["cost"]["response_cache_hits"] == len(cached)
    assert sum(fresh.values()) == summary["requests_made"] == len(ids) - len(cached)
    cached_ids = {by_cache_key[key] for key in cached}
    assert cached_ids <= set(killed), "only answers paid for are cached"
    assert not set(fresh) & cached_ids, "a cached answer was paid for again"
