"""Two runs of one job on one namespace (a zombie Airflow try beside its retry): the
namespace's lease lets one run at a time work, the other waits or is fenced off, and the
output is exact with every call paid once plus the documented bound.

``ZOMBIE_RUNS`` sets how many random start moments the first test tries (default 1)."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import time
from collections import Counter

import pytest

from demo.stack import demo_api
from spark_jobs.exit_status import ExitStatus

from .job_support import job_args, read_output, run_folders, start_job, write_input

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROWS = 6_000
IDS = [f"k{i:05d}" for i in range(ROWS)]
RUNS = int(os.environ.get("ZOMBIE_RUNS", "1"))


def wait_until(check, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(interval)
    raise TimeoutError(f"timed out waiting for {what}")


def finish(process, timeout: float = 600) -> tuple[int, str]:
    output, _ = process.communicate(timeout=timeout)
    return process.returncode, output


@pytest.mark.parametrize("attempt", range(RUNS))
def test_a_second_run_started_at_a_random_moment_waits_and_pays_nothing(tmp_path, attempt):
    moment = random.Random().uniform(0.1, 0.9)
    print(f"\nsecond run starts at {moment:.0%} of the first's calls")
    write_input(tmp_path / "in" / "part.jsonl", IDS)
    with demo_api("--latency-ms", "40") as api:
        args = job_args(tmp_path, api.url, "--partitions", "2", "--capacity", "10")
        first = start_job([*args, "--run-id", "first"])
        wait_until(
            lambda: sum(api.calls_per_key().values()) >= moment * ROWS or first.poll() is not None,
            300,
            "the first run's progress",
        )
        second = start_job([*args, "--run-id", "second"])
        first_code, first_log = finish(first)
        second_code, second_log = finish(second)
        calls = api.calls_per_key()
    assert first_code == 0, first_log[-3000:]
    assert second_code == 0, second_log[-3000:]
    data, dead, summary = read_output(tmp_path / "out")
    assert Counter(r["id"] for r in data + dead) == Counter(IDS), "every record exactly once"
    assert summary["run_id"] == "first"
    assert calls == Counter(IDS), "the second run called the API"
    if "holds this namespace: waiting" in second_log:  # it started while the first ran
        assert "already complete: run first published" in second_log
        # Whom it waited for, since when, until when, and for how long at most.
        assert re.search(
            r"run first holds this namespace: waiting up to 3600s \(--lease-wait\) for it to "
            r"finish or its lease to expire; last renewed \S+Z \(\d+s ago\), expires \S+Z",
            second_log,
        ), second_log[-3000:]


def test_a_stalled_run_loses_its_lease_is_fenced_off_and_the_takeover_is_exact(tmp_path):
    """The real zombie: the first run stalls (SIGSTOP, as a lost heartbeat looks), its
    lease expires, the second takes over and resumes from its snapshots; when the first
    wakes up it can commit and publish nothing."""
    write_input(tmp_path / "in" / "part.jsonl", IDS)
    lease_file = tmp_path / "snapshots" / "manual" / "enrich" / "default" / "_lease.json"
    with demo_api("--latency-ms", "40") as api:
        args = job_args(
            tmp_path, api.url, "--partitions", "2", "--capacity", "10", "--lease-ttl", "3"
        )
        first = start_job([*args, "--run-id", "first"])
        wait_until(lambda: sum(api.calls_per_key().values()) >= ROWS // 3, 300, "progress")
        os.killpg(first.pid, signal.SIGSTOP)
        try:
            calls_by_first = api.settled_calls()
            wait_until(
                lambda: json.loads(lease_file.read_text())["expires_at"] < time.time(),
                60,
                "the first run's lease to expire",
            )
            second = start_job([*args, "--run-id", "second"])
            second_code, second_log = finish(second)
        finally:
            os.killpg(first.pid, signal.SIGCONT)
        first_code, first_log = finish(first)
        calls = api.calls_per_key()
    assert second_code == 0, second_log[-3000:]
    assert "taking over the expired lease of run first" in second_log
    assert "resuming epoch" in second_log
    assert first_code == ExitStatus.LEASE_HELD, first_log[-3000:]
    assert "fenced off" in first_log
    data, dead, summary = read_output(tmp_path / "out")
    assert run_folders(tmp_path / "out") == ["second"], "the fenced run left its folder behind"
    assert Counter(r["id"] for r in data + dead) == Counter(IDS), "every record exactly once"
    assert summary["run_id"] == "second"
    repeated = sum(calls.values()) - ROWS
    # Calls the first run made that its last snapshot had not committed, at most.
    assert repeated <= calls_by_first - summary["replayed_from_snapshot"]
