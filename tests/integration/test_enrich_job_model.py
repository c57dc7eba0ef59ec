"""A model endpoint through the real Spark job, against the demo model endpoint on
loopback: ``--estimate`` calls nothing; ``--max-cost`` stops a run (exit 4) with its spend
in the summary; a run killed mid-way resumes; the result has the schema's typed columns
(struct-free here, arrays included) and the usage columns, and every unusable answer is
a dead letter of its own class with its raw text; nothing is paid twice but the calls
around the kill, and the ledger adds up."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import pytest
import yaml

from demo.stack import settled
from spark_jobs.exit_status import ExitStatus

from .job_support import ROOT, committed_rows, kill_group, read_output, run_job, start_job
from .test_enrich_job import KEY, committed

pytestmark = [pytest.mark.spark, pytest.mark.slow]

RECORDS = 600
CAPACITY, PARTITIONS = 4, 2
PROMPT = "Classify this message: {title}"
SCHEMA = {
    "type": "object",
    "properties": {
        "label": {"type": "string", "enum": ["spam", "ham", "other"]},
        "score": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["label", "score", "tags"],
}

MODEL = {
    "model": "demo-classifier",
    "prompt": PROMPT,
    "output_schema": SCHEMA,
    "parameters": {"max_tokens": 40, "temperature": 0},
    "price_input_per_million": 20.0,
    "price_output_per_million": 80.0,
}


@contextmanager
def model_endpoint(*args: str):
    """``python -m demo.model_api`` on a free loopback port; yields (base URL, get(path)),
    ``get`` reading a control path (``/stats``, ``/calls``) as JSON."""
    process = subprocess.Popen(
        [sys.executable, "-m", "demo.model_api", "--port", "0", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        url = re.search(r"http://\S+", line).group(0)

        def get(path: str) -> dict:
            with urllib.request.urlopen(url.removesuffix("/v1") + path) as answer:
                return json.load(answer)

        yield url, get
    finally:
        process.terminate()
        process.wait(timeout=30)


def title(i: int) -> str:
    if i % 97 == 5:
        return f"REFUSE message {i}"
    if i % 89 == 7:
        return f"FILTER message {i}"
    return f"message number {i}"


def write_job(tmp: Path, titles: list[str], **options: object) -> Path:
    """The input (record ``k0000`` and on, one title each) and a spec of ``options``
    over the job's snapshots every half second; returns the spec's path."""
    (tmp / "in").mkdir()
    lines = [json.dumps({"id": f"k{i:04d}", "title": t}) for i, t in enumerate(titles)]
    (tmp / "in" / "part.jsonl").write_text("\n".join(lines) + "\n")
    where = {"input": tmp / "in", "output": tmp / "out", "snapshot_dir": tmp / "snapshots"}
    spec = {
        **{name: str(path) for name, path in where.items()},
        "key_column": "id",
        "snapshot_interval": 0.5,
        "partitions": PARTITIONS,
        **options,
    }
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def write_spec(tmp: Path, url: str) -> Path:
    return write_job(
        tmp,
        [title(i) for i in range(RECORDS)],
        progress_interval=2,
        capacity=CAPACITY,
        url_template=url + "/chat/completions",
        model=MODEL,
    )


def kill_once_it_paid_and_committed(process, stats, snapshots: Path) -> None:
    """SIGKILL the run once it has paid for 100 more calls and committed some of them."""
    paid, kept = stats()["requests"], committed(snapshots)
    deadline = time.monotonic() + 240
    while stats()["requests"] < paid + 100 or committed(snapshots) <= kept:
        assert process.poll() is None, process.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "the run made no calls"
        time.sleep(0.1)
    kill_group(process)


def committed_prompts(snapshots: Path) -> set[str]:
    """The prompts of the records the snapshots hold, dead letters too: all paid for."""
    return {PROMPT.format(title=row["title"]) for row in committed_rows(snapshots, KEY)}


def test_model_run_estimate_cost_stop_kill_resume_and_ledger(tmp_path):
    with model_endpoint("--malformed-every", "6", "--latency", "0.03") as (url, get):
        stats, calls = partial(get, "/stats"), partial(get, "/calls")
        spec = ["--spec", str(write_spec(tmp_path, url))]
        code, log = run_job([*spec, "--estimate"])
        assert code == 0, log[-3000:]
        estimate = json.loads(next(ln for ln in log.splitlines() if '"prompt_tokens"' in ln))
        assert estimate["records_in"] == RECORDS and estimate["prompt_tokens"] > 0
        assert estimate["completion_tokens_at_most"] == 40 * RECORDS
        assert stats().get("requests", 0) == 0, "--estimate called the model"

        code, log = run_job([*spec, "--max-cost", "0.5"])
        assert code == ExitStatus.BUDGET_SPENT, log[-3000:]
        assert "cost budget spent" in log
        stopped = json.loads((tmp_path / "out" / "_SUMMARY.json").read_text())
        assert stopped["budget_exhausted"] and 0 < stopped["records_done"] < RECORDS
        assert 0 < stopped["cost"]["token_cost"] <= 0.5

        kept_before = committed_prompts(tmp_path / "snapshots")
        kill_once_it_paid_and_committed(start_job(spec), stats, tmp_path / "snapshots")
        settled(lambda: stats()["requests"])
        paid_before_resume = Counter(calls())
        kept = committed_prompts(tmp_path / "snapshots")

        code, log = run_job(spec)
        assert code == 0, log[-3000:]
        # The killed driver's lease (60 s TTL) is taken over at once: its process is gone.
        assert re.search(r"taking over the lease of run \w+: its process \(PID \d+ on this", log)
        assert "waiting up to" not in log, log[-3000:]
        final = stats()
        resumed = Counter(calls()) - paid_before_resume
    data, dead, summary = read_output(tmp_path / "out")
    assert len(data) + len(dead) == RECORDS
    classes = Counter(d["error"].split(":")[0] for d in dead)
    refused = sum(1 for i in range(RECORDS) if title(i).startswith("REFUSE"))
    filtered = sum(1 for i in range(RECORDS) if title(i).startswith("FILTER"))
    assert classes["RefusedError"] == refused and classes["ContentFilteredError"] == filtered
    assert classes["InvalidOutputError"] == final["malformed_prompts"] > 0
    assert set(classes) == {"RefusedError", "ContentFilteredError", "InvalidOutputError"}
    invalid = next(d for d in dead if d["error"].startswith("InvalidOutputError"))
    assert "raw: '{" in invalid["error"], "the raw text is kept"
    row = data[0]
    assert isinstance(row["tags"], list) and isinstance(row["score"], float)
    assert row["label"] in ("spam", "ham", "other") and row["prompt_tokens"] > 0
    # Paid once: the resume pays again only for prompts the killed run had not committed
    # (in flight, or answered after its last snapshot cut), never for a committed or
    # cost-stopped record's.
    assert final["prompts"] == RECORDS
    assert kept > kept_before, "the killed run committed some of its calls"
    assert kept <= set(paid_before_resume), "each committed record's prompt was paid, as sent"
    repaid = set(resumed) & set(paid_before_resume)
    print(f"\nkilled run committed {len(kept - kept_before)}; the resume paid again {len(repaid)}")
    assert not set(resumed) & kept, "a committed record was paid for again"
    ledger = summary["cost"]
    assert 0 < ledger["prompt_tokens"] <= final["prompt_tokens"]
    assert 0 < ledger["completion_tokens"] <= final["completion_tokens"]
    expected = (ledger["prompt_tokens"] * 20 + ledger["completion_tokens"] * 80) / 1e6
    assert ledger["token_cost"] == pytest.approx(expected, abs=1e-6)


EMBED_RECORDS = 3000


def write_embeddings_spec(tmp: Path, url: str) -> Path:
    """Embeddings of every record's title, many a request (the default), one of them
    empty (the endpoint refuses it, as OpenAI does)."""
    titles = [f"message {i} " + "word " * (i % 13) for i in range(EMBED_RECORDS)]
    titles[1234] = ""
    model = {"model": "demo-embed", "api": "embeddings", "prompt": "{title}"}
    return write_job(
        tmp,
        titles,
        url_template=url + "/embeddings",
        model={**model, "inputs_per_request": 25, "limits_window_s": 6},
    )


def test_embeddings_many_a_request_resume_after_a_kill_paying_no_committed_input_again(
    tmp_path,
):
    """A run of batched embeddings killed once it has paid for and committed some, then
    resumed: every record once (the refused input its only dead letter), and no input
    whose record was committed before the kill is paid again."""
    limits = ("--profile", "openai", "--requests", "30", "--minute-s", "6", "--latency", "0.05")
    with model_endpoint(*limits) as (url, get):
        stats, calls = partial(get, "/stats"), partial(get, "/calls")
        spec = ["--spec", str(write_embeddings_spec(tmp_path, url))]
        process = start_job(spec)
        deadline = time.monotonic() + 240
        while stats().get("inputs", 0) < 600 or committed(tmp_path / "snapshots") < 300:
            assert process.poll() is None, process.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "the run made no calls"
            time.sleep(0.1)
        kill_group(process)
        settled(lambda: stats().get("inputs", 0))
        paid_before_resume = Counter(calls())
        kept = {row["title"] for row in committed_rows(tmp_path / "snapshots", KEY)}
        code, log = run_job(spec)
        assert code == 0, log[-3000:]
        final = stats()
        resumed = Counter(calls()) - paid_before_resume
    data, dead, _ = read_output(tmp_path / "out")
    assert len(data) + len(dead) == EMBED_RECORDS
    assert [d["title"] for d in dead] == [""] and "ClientStatusError" in dead[0]["error"]
    assert all(len(row["embedding"]) == 8 and row["prompt_tokens"] > 0 for row in data)
    assert 300 <= len(kept) < EMBED_RECORDS
    assert not set(resumed) & (kept - {""}), "a committed record's input was paid again"
    assert final["requests"] < EMBED_RECORDS / 10, "many inputs a request"
    assert final["inputs"] >= EMBED_RECORDS - 1
    repaid = set(resumed) & set(paid_before_resume)
    print(f"\ncommitted at the kill {len(kept)}; inputs paid again {len(repaid)}")
