"""``make demo-model``: the job classifying messages through a model endpoint, with a
kill, a resume, and the tokens and cost it paid.

Starts the demo model endpoint (``demo/model_api.py``: deterministic answers, every 6th
structured answer truncated JSON, tokens and requests limited per 6 s window), writes
600 messages (a few that the model refuses or its filter withholds), prints the job's
``--estimate``, runs the job with a JSON schema and prices, kills it (the whole process
group, JVM and Python workers) once a third is paid for, runs it again to the end, and
prints what the result holds: the typed columns, the dead letters by class, the tokens
and cost of the run, and how many prompts were paid twice (only those in flight or
answered after the last snapshot when the kill came). Then the same messages in batch
mode (``--model-mode batch``, the endpoint's emulated Batch API): killed while its batches
run, resumed (it re-attaches to them), at half the token cost and no request paid twice.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import yaml

from demo.stack import ROOT
from spark_jobs.driver.current_result import read_result

WORK = ROOT / ".demo-model"
RECORDS = 600
SCHEMA = {
    "type": "object",
    "properties": {
        "label": {"type": "string", "enum": ["billing", "bug", "other"]},
        "confidence": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["label", "confidence", "tags"],
}


def message(i: int) -> str:
    special = {5: "REFUSE", 7: "FILTER"}.get(i % 97, "")
    return f"{special} customer message number {i}".strip()


MODEL = {
    "model": "demo-classifier",
    "prompt": "Classify this support message: {text}",
    "output_schema": SCHEMA,
    "parameters": {"max_tokens": 60, "temperature": 0},
    "limits_window_s": 6,
    "price_input_per_million": 0.15,
    "price_output_per_million": 0.60,
}


def write_spec(url: str) -> Path:
    (WORK / "in").mkdir(parents=True)
    rows = (json.dumps({"id": f"m{i:04d}", "text": message(i)}) for i in range(RECORDS))
    (WORK / "in" / "messages.jsonl").write_text("\n".join(rows) + "\n")
    spec = {
        "input": str(WORK / "in"),
        "output": str(WORK / "out"),
        "key_column": "id",
        "snapshot_dir": str(WORK / "snapshots"),
        "snapshot_interval": 1,
        "partitions": 2,
        "capacity": 8,
        "url_template": url + "/chat/completions",
        "model": MODEL,
    }
    path = WORK / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))  # the schema's order: the columns'
    batch = {**spec, "output": str(WORK / "out-batch"), "snapshot_dir": str(WORK / "batches")}
    batch["model"] = {**MODEL, "mode": "batch", "batch_poll_s": 0.5}
    (WORK / "spec-batch.yaml").write_text(yaml.safe_dump(batch, sort_keys=False))
    return path


def job(spec: Path, *extra: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "spark_jobs.enrich_job", "--spec", str(spec), *extra]
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def stats(control: str) -> dict[str, int]:
    with urllib.request.urlopen(control + "/stats") as answer:
        return dict(json.load(answer))


def main() -> int:
    shutil.rmtree(WORK, ignore_errors=True)
    limits = ["--tokens", "4000", "--requests", "300", "--window", "6", "--latency", "0.2"]
    limits += ["--process-s", "8", "--day-s", "120"]  # a batch runs 8 s of its "24 h" 120
    endpoint = subprocess.Popen(
        [sys.executable, "-m", "demo.model_api", "--port", "0", "--malformed-every", "6", *limits],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = endpoint.stdout.readline() if endpoint.stdout else ""
        url = re.search(r"http://\S+", line).group(0)  # type: ignore[union-attr]
        control = url.removesuffix("/v1")
        spec = write_spec(url)
        lines = job(spec, "--estimate").communicate()[0].splitlines()
        estimate = next(line for line in lines if line.startswith("{") and "prompt" in line)
        print("estimate before any call:", estimate)
        code = killed_and_resumed(
            spec, control, lambda: stats(control).get("prompts", 0) >= RECORDS // 3
        )
        if code != 0:
            return code
        report(stats(control))
        return batch_run(spec, control)
    finally:
        endpoint.terminate()
        endpoint.wait()
    return 0


def killed_and_resumed(spec: Path, control: str, until: Callable[[], bool]) -> int:
    """Run the job, kill it (its whole process group) once ``until()``, run it again."""
    first = job(spec)
    while not until() and first.poll() is None:
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    paid = stats(control)
    print(
        f"killed the job: {paid['prompts']} prompts paid for so far in all, "
        f"{paid['batches_created']} batches created"
    )
    second = job(spec)
    log = second.communicate()[0]
    if second.returncode != 0:
        print(log[-3000:])
    return second.returncode


def batch_run(online_spec: Path, control: str) -> int:
    """The same run in batch mode, killed while its batches run, then resumed."""
    spec = online_spec.with_name("spec-batch.yaml")
    print("\nbatch mode:", end=" ")
    code = killed_and_resumed(spec, control, lambda: stats(control).get("batch_requests", 0) > 0)
    if code != 0:
        return code
    online = read_result(str(WORK / "out")).summary["cost"].get("token_cost")
    cost = read_result(str(WORK / "out-batch")).summary["cost"].get("token_cost")
    calls = stats(control)
    print(
        f"batch mode: cost {cost} (online {online}); {calls['batches_created']} batches, "
        f"{calls['batch_requests_charged']} requests charged, "
        f"{calls['custom_ids_paid_twice']} paid twice"
    )
    return 0


def report(calls: dict[str, int]) -> None:
    result = read_result(str(WORK / "out"))
    data = pq.read_table(result.data)
    dead = pq.read_table(result.dead_letters).to_pylist()
    print("columns:", ", ".join(f"{f.name} {f.type}" for f in data.schema))
    print("a row:", data.slice(0, 1).to_pylist()[0])
    print("dead letters:", dict(Counter(d["error"].split(":")[0] for d in dead)))
    cost = result.summary["cost"]
    print(
        f"tokens paid: {cost['prompt_tokens']} prompt, {cost['completion_tokens']} completion; "
        f"cost {cost.get('token_cost')} (calls counted: {result.summary['accounting']['calls']})"
    )
    print(
        f"endpoint: {calls['requests']} calls, {calls.get('throttled', 0)} answered 429, "
        f"{calls['prompts_paid_twice']} prompts paid twice (in flight at the kill)"
    )


if __name__ == "__main__":
    sys.exit(main())
