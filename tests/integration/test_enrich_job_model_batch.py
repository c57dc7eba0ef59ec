"""The Spark job in batch mode (``--model-mode batch``) against the demo endpoint's batch
API in its own process: the same output as the online run at half its token cost, and a
driver killed while its batches run resumes by re-attaching to them, paying no request
twice."""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from spark_jobs.exit_status import ExitStatus

from .job_support import kill_group, read_output, run_job, start_job
from .test_enrich_job_model import RECORDS, model_endpoint, write_spec

pytestmark = [pytest.mark.spark, pytest.mark.slow]

KNOBS = ("--process-s", "4", "--day-s", "120")


def spec_of(tmp: Path, url: str) -> list[str]:
    path = write_spec(tmp, url)
    spec = yaml.safe_load(path.read_text())
    spec["model"].update(batch_wait_s=0.3, batch_poll_s=0.2)
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return ["--spec", str(path)]


def rows(out: Path) -> tuple[list[dict], list[dict], dict]:
    """The rows and dead letters by key (each endpoint's port left out of the messages)."""
    data, dead, summary = read_output(out)
    for letter in dead:
        letter["error"] = re.sub(r"127\.0\.0\.1:\d+", "endpoint", letter["error"])
    return sorted(data, key=lambda r: r["id"]), sorted(dead, key=lambda r: r["id"]), summary


def test_batch_run_same_output_half_cost_and_a_kill_while_running_pays_nothing_twice(tmp_path):
    (tmp_path / "online").mkdir()
    (tmp_path / "batch").mkdir()
    (tmp_path / "killed").mkdir()
    with model_endpoint(*KNOBS) as (url, get):
        code, log = run_job(spec_of(tmp_path / "online", url))
        assert code == 0, log[-3000:]
    with model_endpoint(*KNOBS) as (url, get):
        code, log = run_job([*spec_of(tmp_path / "batch", url), "--model-mode", "batch"])
        assert code == 0, log[-3000:]
        batch_stats = get("/stats")
    online, batch = rows(tmp_path / "online" / "out"), rows(tmp_path / "batch" / "out")
    assert batch[0] == online[0] and batch[1] == online[1]  # every row and dead letter
    assert len(batch[0]) + len(batch[1]) == RECORDS
    assert batch_stats.get("requests", 0) == 0, "no online call in batch mode"
    assert batch_stats["batch_requests_charged"] == RECORDS
    cost_online, cost_batch = online[2]["cost"], batch[2]["cost"]
    assert cost_batch["prompt_tokens"] == cost_online["prompt_tokens"]
    assert cost_batch["token_cost"] == pytest.approx(0.5 * cost_online["token_cost"], rel=1e-6)
    assert cost_batch["batch_prompt_tokens"] == cost_batch["prompt_tokens"]

    with model_endpoint(*KNOBS) as (url, get):
        spec = [*spec_of(tmp_path / "killed", url), "--model-mode", "batch"]
        process = start_job(spec)
        deadline = time.monotonic() + 240
        while not 0 < get("/stats").get("batch_requests", 0) < RECORDS // 2:
            assert process.poll() is None, process.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "no batch ran"
            time.sleep(0.05)
        kill_group(process)  # while its batches run
        code, log = run_job(spec)
        assert code == 0, log[-3000:]
        final = get("/stats")
    killed = rows(tmp_path / "killed" / "out")
    assert killed[0] == online[0] and killed[1] == online[1]
    assert final["custom_ids_paid_twice"] == 0 and final["prompts_paid_twice"] == 0
    assert final["batch_requests_charged"] == RECORDS
    assert final["batches_created"] == batch_stats["batches_created"]  # re-attached, none new


def test_a_driver_killed_after_its_create_calls_re_attaches_by_the_batches_metadata(tmp_path):
    """The create calls were made but their answers never came (the endpoint holds them):
    no batch id was written, and the resumed run finds each batch by its intent."""
    with model_endpoint(*KNOBS) as (url, get):
        spec = [*spec_of(tmp_path, url), "--model-mode", "batch"]
        post(url, "/stall?step=create")
        process = start_job(spec)
        deadline = time.monotonic() + 240
        while "create" not in get("/stats")["batch_steps_reached"]:
            assert process.poll() is None, process.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "no batch was created"
            time.sleep(0.05)
        kill_group(process)
        post(url, "/stall")
        created = get("/stats")["batches_created"]
        code, log = run_job(spec)
        assert code == 0, log[-3000:]
        final = get("/stats")
    data, dead, _ = rows(tmp_path / "out")
    assert len(data) + len(dead) == RECORDS
    assert created >= 1
    said = (ln for ln in log.splitlines() if "starting fresh" in ln or "resuming" in ln)
    opened = next(said, "")  # the driver's decision comes first
    assert final["custom_ids_paid_twice"] == 0 and final["batch_requests_charged"] == RECORDS, (
        f"{final['custom_ids_paid_twice']} requests paid twice: the resumed run did not "
        f"re-attach to the {created} batch(es) created before the kill (batches now "
        f"{final['batches_created']}); it said {opened!r}; endpoint stats {final}"
    )


def post(url: str, path: str) -> None:
    request = urllib.request.Request(url.removesuffix("/v1") + path, method="POST")
    urllib.request.urlopen(request).read()


def test_a_run_stopped_by_its_budget_online_resumes_in_batch_mode_paying_nothing_twice(tmp_path):
    with model_endpoint(*KNOBS, "--latency", "0.01") as (url, get):
        spec = spec_of(tmp_path, url)
        code, log = run_job([*spec, "--max-cost", "0.3"])
        assert code == ExitStatus.BUDGET_SPENT, log[-3000:]
        online_calls = get("/stats")["requests"]
        code, log = run_job([*spec, "--model-mode", "batch"])
        assert code == 0, log[-3000:]
        final = get("/stats")
    data, dead, summary = rows(tmp_path / "out")
    assert len(data) + len(dead) == RECORDS
    assert 0 < online_calls < RECORDS and final["requests"] == online_calls  # none online after
    assert final["batch_requests_charged"] == RECORDS - online_calls
    assert final["prompts_paid_twice"] == 0
    cost = summary["cost"]
    online = (cost["prompt_tokens"] - cost["batch_prompt_tokens"]) * 20 + (
        cost["completion_tokens"] - cost["batch_completion_tokens"]
    ) * 80
    batch = (cost["batch_prompt_tokens"] * 20 + cost["batch_completion_tokens"] * 80) / 2
    assert 0 < cost["batch_prompt_tokens"] < cost["prompt_tokens"]
    assert cost["token_cost"] == pytest.approx((online + batch) / 1e6, abs=1e-6)
