"""Runs that fail as a whole through the real job (Spark local[2], the demo API on
loopback): a wrong key stops like an outage, a dead-letter ceiling fails a finished run,
and neither publishes anything nor loses what was paid for."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from demo.stack import demo_api
from spark_jobs.driver.current_result import read_result
from spark_jobs.exit_status import ExitStatus
from spark_jobs.snapshots import NamespaceKey, SnapshotStore

from .job_support import (
    job_args,
    kill_group,
    read_output,
    run_folders,
    run_job,
    start_job,
    write_input,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

KEY = NamespaceKey("manual", "enrich", "default")
RIGHT, WRONG = "right-key-7d1e", "wrong-key-93af"


def snapshot_counts(snapshot_dir: Path) -> tuple[int, int]:
    """(results, dead letters) committed in the namespace's snapshots."""
    partitions = SnapshotStore(str(snapshot_dir)).namespace_progress(KEY)
    assert partitions, "the snapshots are kept"
    return sum(p.committed_rows for p in partitions), sum(p.dead_letter_rows for p in partitions)


def test_a_wrong_key_fails_the_run_at_once_and_the_fixed_run_resumes_and_succeeds(tmp_path):
    ids = [f"k{i:05d}" for i in range(2000)]
    write_input(tmp_path / "in" / "part.jsonl", ids)
    capacity = 10
    args = job_args(tmp_path, None, "--partitions", "2", "--capacity", str(capacity))
    args += ["--token-env", "GEO_API_KEY"]
    with demo_api("--token-env", "DEMO_TOKEN", env={"DEMO_TOKEN": RIGHT}) as api:
        args += ["--url-template", api.url + "/customers/{id}"]
        started = time.monotonic()
        code, log = run_job(args, env={"GEO_API_KEY": WRONG})
        wall = time.monotonic() - started
        refused = api.get("/stats")["by_status"]
        assert code == ExitStatus.SYSTEMIC_FAILURE, log[-3000:]
        assert "account-level failure: the API answered 401" in log, log[-3000:]
        assert "check the API key / bearer token (from $GEO_API_KEY)" in log
        assert "Nothing was published and no dead letter was written" in log
        assert WRONG not in log and RIGHT not in log, "no secret in any message"
        assert not list(tmp_path.glob("out*")), "nothing published, no run folder left"
        assert snapshot_counts(tmp_path / "snapshots") == (0, 0), "no dead letters written"
        assert set(refused) == {"401"}
        assert refused["401"] <= 2 * capacity, "the first 401 stops each partition"
        print(f"\nwrong key: exit {code} after {refused['401']} calls, {wall:.1f} s wall")

        code, log = run_job(args, env={"GEO_API_KEY": RIGHT})
        assert code == 0, log[-3000:]
        assert "resuming epoch" in log
        calls = api.calls_per_key()
    data, dead, summary = read_output(tmp_path / "out")
    assert dead == [] and summary["dead_letters"] == 0
    assert Counter(r["id"] for r in data) == Counter(ids)
    assert calls == Counter(ids), "every record paid for once with the right key"


def test_a_dead_letter_ceiling_fails_a_finished_run_and_a_rerun_replays_it_without_calls(
    tmp_path,
):
    ids = [f"k{i:05d}" for i in range(1000)]
    write_input(tmp_path / "in" / "part.jsonl", ids)
    with demo_api("--bad-request-rate", "0.05") as api:
        args = job_args(tmp_path, api.url, "--partitions", "2", "--max-dead-letters", "1%")
        code, log = run_job(args)
        assert code == ExitStatus.DEAD_LETTER_CEILING, log[-3000:]
        assert "dead-letter ceiling crossed:" in log
        assert "more than --max-dead-letters 1% (10)" in log
        assert '"failed": "dead-letter ceiling crossed' in log, "the printed summary says why"
        assert "systemic" not in log, "400s that vary by record are dead letters"
        assert not (tmp_path / "out" / "_SUMMARY.json").exists(), "nothing published"
        rejected = read_result(str(tmp_path / "out.rejected"))  # set aside, not published
        assert pq.read_table(rejected.dead_letters).num_rows == rejected.summary["dead_letters"]
        enriched, dead_letters = snapshot_counts(tmp_path / "snapshots")
        assert enriched + dead_letters == len(ids) and dead_letters > 10
        calls = api.calls_per_key()

        args[args.index("1%")] = "10%"  # the ceiling is no part of the job's identity
        code, log = run_job(args)
        assert code == 0, log[-3000:]
        assert api.calls_per_key() == calls, "the rerun replays; it pays for nothing again"
    data, dead, summary = read_output(tmp_path / "out")
    assert len(dead) == dead_letters and all("HTTP 400" in r["error"] for r in dead)
    assert Counter(r["id"] for r in [*data, *dead]) == Counter(ids)
    assert summary["replayed_from_snapshot"] == len(ids)
    assert not (tmp_path / "out.rejected").exists(), "superseded by the published output"
    assert run_folders(tmp_path / "out") == [summary["run_id"]], "the rejected run's is gone"


def test_retry_dead_letters_calls_only_the_chosen_ones_and_publishes_every_record_once(
    tmp_path,
):
    ids = [f"k{i:05d}" for i in range(1500)]
    write_input(tmp_path / "in" / "part.jsonl", ids)
    # 5 % of the records answer 500 to their first 2 calls (flaky, then fixed), 2 % always 400.
    faults = ("--error-rate", "0.05", "--fault-attempts", "2", "--bad-request-rate", "0.02")
    with demo_api(*faults) as api:
        args = job_args(tmp_path, api.url, "--partitions", "2", "--max-attempts", "2")
        code, log = run_job(args)
        assert code == 0, log[-3000:]
        _, dead, first = read_output(tmp_path / "out")
        flaky = sorted(r["id"] for r in dead if r["error"].startswith("ServerError:"))
        bad = sorted(r["id"] for r in dead if r["error"].startswith("ClientStatusError:"))
        assert flaky and bad and len(flaky) + len(bad) == len(dead) == first["dead_letters"]
        calls = api.calls_per_key()

        code, log = run_job([*args, "--retry-dead-letters", "ServerError"])
        assert code == 0, log[-3000:]
        retry_calls = api.calls_per_key() - calls
        assert retry_calls == Counter(flaky), "calls only for the chosen dead letters"

        again, again_log = run_job(args)  # the plain job again: the retry's result stands
        assert again == 0 and "already complete" in again_log, again_log[-3000:]
        assert api.calls_per_key() - calls == Counter(flaky)
    data, dead, summary = read_output(tmp_path / "out")
    assert Counter(r["id"] for r in [*data, *dead]) == Counter(ids), "every record once"
    assert sorted(r["id"] for r in dead) == bad
    assert all(r["name"] for r in data)
    assert summary["records_in"] == len(ids) and summary["dead_letters"] == len(bad)
    assert summary["dead_letter_retry"] == {
        "classes": ["ServerError"],
        "retried": len(flaky),
        "enriched": len(flaky),
        "dead_letters": 0,
        "base_run_id": first["run_id"],
    }
    assert not list(tmp_path.glob("out.*")), "no staging or rejected result left"


def test_retry_dead_letters_of_a_run_rejected_by_the_ceiling_publishes_it(tmp_path):
    ids = [f"k{i:05d}" for i in range(1000)]
    write_input(tmp_path / "in" / "part.jsonl", ids)
    with demo_api("--error-rate", "0.05", "--fault-attempts", "2") as api:
        args = job_args(tmp_path, api.url, "--partitions", "2", "--max-attempts", "2")
        args += ["--max-dead-letters", "1%"]
        code, log = run_job(args)
        assert code == ExitStatus.DEAD_LETTER_CEILING, log[-3000:]
        calls = api.calls_per_key()
        _, dead_letters = snapshot_counts(tmp_path / "snapshots")

        code, log = run_job([*args, "--retry-dead-letters"])
        assert code == 0, log[-3000:]
        retried = api.calls_per_key() - calls
    data, dead, summary = read_output(tmp_path / "out")
    assert dead == [] and Counter(r["id"] for r in data) == Counter(ids)
    assert sum(retried.values()) == len(retried) == dead_letters, "one call per dead letter"
    assert summary["dead_letter_retry"]["classes"] == "all"
    assert summary["dead_letter_retry"]["retried"] == dead_letters
    assert not (tmp_path / "out.rejected").exists()


def test_a_retry_of_dead_letters_killed_midway_resumes_in_its_own_namespace(tmp_path):
    ids = [f"k{i:05d}" for i in range(3000)]
    write_input(tmp_path / "in" / "part.jsonl", ids)
    retry_key = NamespaceKey("manual", "enrich.dead-letters", "default")
    retry_store = SnapshotStore(str(tmp_path / "snapshots"))

    def retried() -> int:
        try:
            return sum(p.done_rows for p in retry_store.namespace_progress(retry_key))
        except FileNotFoundError:
            return 0

    faults = ("--error-rate", "0.2", "--fault-attempts", "2", "--latency-ms", "100")
    with demo_api(*faults) as api:
        args = job_args(tmp_path, api.url, "--partitions", "2", "--max-attempts", "2")
        # The failing records finish last (after their backoff), in a streak the outage
        # stop would hold: this test wants them as dead letters.
        args += ["--outage-threshold", "0"]
        code, log = run_job(args)
        assert code == 0, log[-3000:]
        _, dead, _ = read_output(tmp_path / "out")
        calls = api.calls_per_key()
        retry = [*args, "--retry-dead-letters", "--capacity", "4"]  # slow: killed midway
        job = start_job(retry)
        deadline = time.monotonic() + 240
        while retried() < 0.3 * len(dead):
            assert job.poll() is None, job.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "no progress"
            time.sleep(0.2)
        kill_group(job)
        code, log = run_job(retry)
        assert code == 0, log[-3000:]
        assert "resuming epoch" in log
        repeated = api.calls_per_key() - calls
    data, dead_after, summary = read_output(tmp_path / "out")
    assert dead_after == [] and Counter(r["id"] for r in data) == Counter(ids)
    assert set(repeated) == {r["id"] for r in dead}, "calls only for the dead letters"
    assert summary["dead_letter_retry"]["retried"] == len(dead)


def test_retry_dead_letters_refuses_a_rejected_summary_naming_a_folder_outside_the_output(
    tmp_path,
):
    """A planted ``<output>.rejected/_SUMMARY.json`` whose ``result`` leaves the output:
    the retry reads nothing there, calls nothing and publishes nothing."""
    write_input(tmp_path / "in" / "part.jsonl", ["k00001", "k00002"])
    foreign = tmp_path / "elsewhere" / "runs" / "x"
    (foreign / "data").mkdir(parents=True)
    (foreign / "dead_letters").mkdir()
    pq.write_table(pa.table({"id": ["secret-row"], "name": ["x"]}), foreign / "data" / "p.parquet")
    dead = {"id": ["other-key"], "error": ["ServerError: no"], "attempts": [1]}
    pq.write_table(pa.table(dead), foreign / "dead_letters" / "p.parquet")
    rejected = tmp_path / "out.rejected"
    rejected.mkdir()
    planted = {"run_id": "x", "records_in": 2, "enriched": 1, "dead_letters": 1}
    (rejected / "_SUMMARY.json").write_text(
        json.dumps({**planted, "result": "../elsewhere/runs/x"})
    )
    with demo_api() as api:
        code, log = run_job([*job_args(tmp_path, api.url), "--retry-dead-letters"])
        calls = api.calls_per_key()
    assert code == ExitStatus.CANNOT_RUN, log[-3000:]
    expected = f"{rejected}/_SUMMARY.json: result '../elsewhere/runs/x' is not runs/<run folder>"
    assert expected in log
    assert not calls, "nothing was called"
    assert not (tmp_path / "out").exists(), "nothing was published"


def test_an_api_down_for_a_run_too_small_to_prove_an_outage_fails_it_and_the_retry_enriches(
    tmp_path,
):
    """Partitions of 15 records never reach --outage-threshold (50): every call refused
    left every record a dead letter and the run green. With no record enriched the run
    fails as a ceiling does, naming an error; --retry-dead-letters then calls them all."""
    ids = [f"k{i:05d}" for i in range(60)]
    write_input(tmp_path / "in" / "part.jsonl", ids)
    with demo_api() as down:
        url = down.url
    args = job_args(tmp_path, url, "--partitions", "4", "--max-attempts", "2")
    code, log = run_job(args)
    assert code == ExitStatus.DEAD_LETTER_CEILING, log[-3000:]
    assert "nothing enriched: all 60 records are dead letters (one: TransportError:" in log
    assert "Cannot connect to host" in log and "--retry-dead-letters" in log
    assert not (tmp_path / "out" / "_SUMMARY.json").exists(), "nothing published"
    with demo_api() as api:
        retry = [*job_args(tmp_path, api.url, "--partitions", "4"), "--retry-dead-letters"]
        code, log = run_job(retry)
        assert code == 0, log[-3000:]
        calls = api.calls_per_key()
    data, dead, summary = read_output(tmp_path / "out")
    assert dead == [] and sorted(r["id"] for r in data) == ids
    assert calls == Counter(ids), "one call per record"
    assert summary["dead_letter_retry"]["retried"] == len(ids)
