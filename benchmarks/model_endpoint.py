"""The model-endpoint enricher against a token- and request-limited endpoint, beside the
hand-written ``mapInArrow`` + aiohttp recipe (``benchmarks/model_recipe.py``).

Run with ``make bench-model`` (``python -m benchmarks.model_endpoint``). The demo model
endpoint (``demo/model_api.py``, its own process, 0.3 s per answer) admits T tokens and R
requests per window and answers 429 with OpenAI's ``x-ratelimit-*`` headers and
``Retry-After`` beyond. Providers' windows are a minute; to keep a run to about a minute
here the limits are per ``WINDOW_S`` = 6 s, i.e. a minute scaled down tenfold (T and R
per 6 s are 10 T and 10 R per minute), and the job is told so (``limits_window_s``).
Tokens bind: at about 20 tokens a call T (500 tokens/s) is reached at about 25 calls/s,
R at 50. The endpoint's first window opens at the first call (``--windows-from-first-call``,
``BENCH_MODEL_ALIGN=0`` for windows from the endpoint's start): with windows from the
start, where in a window each contender's start-up happened to end decided up to a
window (6 s) of the comparison, as a run's start against a provider's minute does, by
chance, in production.

Both run on Spark ``local[2]`` with 2 partitions and 8 calls in flight each, over the
same records, prompt and schema; the job is given no limits: it learns them from the
headers. Reported, from the endpoint's own log of calls: the share of the binding limit
used in the whole windows after the first, the share of calls answered 429, dead
letters (rows the recipe gave up on), records/s over the wall time (Spark's start and
the job's reads and writes included) and over the span from the first call to the last.
Then each runs again against a fresh endpoint, killed (SIGKILL to its process tree)
once half the records are paid for, and once more to the end: the prompts the second
run paid again, and the records/s of both runs (``BENCH_MODEL_KILL=0`` skips this).

Ray Data's ``HttpRequestProcessorConfig`` (``ray.data.llm``, ``benchmarks/model_ray.py``)
runs third, in the benchmark environment (``make bench-venv``): the same records, body
and calls in flight, Ray's ``qps`` at the request limit, 5 attempts (more where its
backoff would give up within a window: ``ray_retries``), and Ray Data's checkpointing for
the rerun after the kill. Daft's ``prompt()`` (``benchmarks/model_daft.py``, the same
environment) and Bespoke Curator (``benchmarks/model_curator.py``, ``make
bench-venv-curator``) follow, each given the endpoint's base URL, and Curator its limits
per minute, from here (``daft_command``, ``curator_command``). A contender whose
environment cannot import it is reported as ``not installed: <reason>``. The kill is run
for those that resume (and the recipe): not for Daft, which keeps nothing. Results go to
``benchmarks/results/model_endpoint.json``.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import yaml

from benchmarks.model_recipe import ATTEMPTS
from benchmarks.peers.measure import TreeSampler
from benchmarks.peers.run import REPO, bench_python, setting
from spark_jobs.session.class_archive import class_archive

ROOT = Path(__file__).resolve().parents[1]
WINDOW_S = float(os.environ.get("BENCH_MODEL_WINDOW_S", "6"))
"""The endpoint's window: a provider's minute scaled down tenfold by default; 60 for a
provider's own (with T, R and the records scaled up to match, the run takes longer)."""
PROFILE = os.environ.get("BENCH_MODEL_PROFILE", "fixed-window")
"""The endpoint's provider profile (``demo/provider_profiles.py``): ``fixed-window`` (the
demo's windows), ``openai`` or ``azure`` (buckets charged prompt plus ``max_tokens``: give
``BENCH_MODEL_TOKENS`` about three times the tokens for the same calls)."""
RESULTS = (
    Path(__file__).parent
    / "results"
    / (
        ("model_endpoint" if WINDOW_S == 6 else f"model_endpoint_window_{WINDOW_S:g}s")
        + ("" if PROFILE == "fixed-window" else f"_{PROFILE}")
        + ".json"
    )
)
TOKENS = int(os.environ.get("BENCH_MODEL_TOKENS", "3000"))
REQUESTS = int(os.environ.get("BENCH_MODEL_REQUESTS", "300"))
RECORDS = int(os.environ.get("BENCH_MODEL_RECORDS", "1500"))
KILL = os.environ.get("BENCH_MODEL_KILL", "1") == "1"
"""Also kill each run that can resume at half its records and run it again."""
TIMEOUT_S = float(os.environ.get("BENCH_MODEL_TIMEOUT_S", "900"))
"""A run still going after this is killed and reported as failed (a contender that
retries without end, or hangs on an answer it cannot read, still ends the benchmark)."""
ALIGN = os.environ.get("BENCH_MODEL_ALIGN", "1") == "1"
"""The endpoint's first window opens at the first call (else at the endpoint's start)."""
LATENCY_S = 0.3
SNAPSHOT_S = 1.0
"""Cuts every second (the default is 10 s): a kill re-pays the calls answered since the
last cut, and a model's calls are dear."""
CAPACITY = 8
SCHEMA = {
    "type": "object",
    "properties": {
        "label": {"type": "string", "enum": ["spam", "ham", "other"]},
        "score": {"type": "number"},
    },
    "required": ["label", "score"],
}
PROMPT = "Classify this message: {title}"


@contextmanager
def endpoint() -> Iterator[tuple[str, str]]:
    """A fresh demo endpoint; yields (API base URL, control base URL)."""
    limits = ["--tokens", str(TOKENS), "--requests", str(REQUESTS), "--profile", PROFILE]
    if PROFILE == "fixed-window":
        limits += ["--window", str(WINDOW_S)] + (["--windows-from-first-call"] if ALIGN else [])
    else:
        limits += ["--minute-s", str(WINDOW_S)]  # a bucket has no window to align
    command = [sys.executable, "-m", "demo.model_api", "--port", "0", "--latency", str(LATENCY_S)]
    process = subprocess.Popen([*command, *limits], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        match = re.search(r"http://\S+", process.stdout.readline() if process.stdout else "")
        assert match is not None, "the demo model endpoint did not start"
        yield match.group(0), match.group(0).removesuffix("/v1")
    finally:
        process.terminate()
        process.wait(timeout=30)


def limit_use(control: str) -> dict[str, Any]:
    """From the endpoint's call log: 429 share, and the share of each limit used in the
    whole windows after the first one with a call."""
    with urllib.request.urlopen(control + "/timeline") as answer:
        calls = json.load(answer)["calls"]
    if not calls:
        return {"calls": 0}
    admitted = [(call["at"], call["tokens"]) for call in calls if call["admitted"]]
    first = math.floor(calls[0]["at"] / WINDOW_S) + 1
    last = math.floor(calls[-1]["at"] / WINDOW_S)  # the window of the last call is partial
    windows = max(0, last - first)
    inside = [tokens for t, tokens in admitted if first * WINDOW_S <= t < last * WINDOW_S]
    token_share = sum(inside) / (TOKENS * windows) if windows else None
    request_share = len(inside) / (REQUESTS * windows) if windows else None
    per_window: dict[int, int] = {}
    for t, tokens in admitted:
        per_window[int(t // WINDOW_S)] = per_window.get(int(t // WINDOW_S), 0) + tokens
    span = calls[-1]["at"] - calls[0]["at"]
    return {
        "calling_s": round(span, 1),
        "records_per_s_calling": round(RECORDS / span, 2) if span else None,
        "token_limit_used_per_window": [
            round(per_window.get(w, 0) / TOKENS, 3) for w in range(last + 1)
        ],
        "calls": len(calls),
        "answered_429": len(calls) - len(admitted),
        "share_429": round((len(calls) - len(admitted)) / len(calls), 4),
        "windows_measured": windows,
        "token_limit_used": round(token_share, 3) if token_share is not None else None,
        "request_limit_used": round(request_share, 3) if request_share is not None else None,
    }


def write_input(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"id": f"k{i:05d}", "title": f"message number {i}"}) for i in range(RECORDS)
    ]
    (directory / "part.jsonl").write_text("\n".join(lines) + "\n")
    return directory


def job_command(work: Path, url: str, inputs: Path) -> list[str]:
    """The enrichment job over ``inputs`` (its snapshots and output under ``work``)."""
    spec = {
        "input": str(inputs),
        "output": str(work / "out"),
        "key_column": "id",
        "snapshot_dir": str(work / "snapshots"),
        "snapshot_interval": SNAPSHOT_S,
        "partitions": 2,
        "capacity": CAPACITY,
        "url_template": url + "/chat/completions",
        "model": {
            "model": "demo",
            "prompt": PROMPT,
            "output_schema": SCHEMA,
            "parameters": {"max_tokens": 40},
            "limits_window_s": WINDOW_S,
        },
    }
    work.mkdir(parents=True, exist_ok=True)
    (work / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return [sys.executable, "-m", "spark_jobs.enrich_job", "--spec", str(work / "spec.yaml")]


def chat_body() -> dict[str, Any]:
    """The request body of the recipe and Ray Data: the prompt (``{title}`` filled in per
    record) and the schema as ``response_format``, as the job sends them."""
    schema = {"name": "output", "strict": True, "schema": SCHEMA}
    return {
        "model": "demo",
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 40,
        "response_format": {"type": "json_schema", "json_schema": schema},
    }


def recipe_command(work: Path, url: str, inputs: Path) -> list[str]:
    """The recipe over the same input, prompt and schema."""
    command = [sys.executable, "-m", "benchmarks.model_recipe", "--url", url + "/chat/completions"]
    command += ["--input", str(inputs), "--output", str(work / "answers")]
    return [*command, "--body", json.dumps(chat_body()), "--capacity", str(CAPACITY)]


def ray_command(work: Path, url: str, inputs: Path) -> list[str]:
    """Ray Data's HTTP processor over the same input and body, in the benchmark
    environment; its checkpoints under ``work``, so a rerun after a kill resumes."""
    command = [bench_python(), "-m", "benchmarks.model_ray", "--url", url + "/chat/completions"]
    command += ["--input", str(inputs), "--output", str(work / "ray")]
    command += ["--body", json.dumps(chat_body()), "--capacity", str(CAPACITY)]
    qps = str(math.floor(REQUESTS / WINDOW_S))  # the request limit: Ray knows no tokens
    command += ["--qps", qps, "--records", str(RECORDS), "--max-retries", str(ray_retries())]
    return [*command, "--checkpoint-dir", str(work / "checkpoints")]


def ray_retries() -> int:
    """Ray's ``max_retries``: the recipe's 5 attempts, or more where its backoff (1, 2, 4...
    s, ``Retry-After`` unread) would give up before the window turns; a row whose retries
    run out fails Ray's whole run."""
    spanning_a_window = math.ceil(math.log2(WINDOW_S + 1))
    return max(4, spanning_a_window)


def daft_command(work: Path, url: str, inputs: Path) -> list[str]:
    """Daft's ``prompt()`` over the same input and body, the same calls in flight in all,
    the recipe's attempts; in the benchmark environment."""
    command = [bench_python(), "-m", "benchmarks.model_daft", "--base-url", url]
    command += ["--input", str(inputs), "--output", str(work / "answers")]
    command += ["--body", json.dumps(chat_body()), "--calls-in-flight", str(2 * CAPACITY)]
    return [*command, "--attempts", str(ATTEMPTS)]


def curator_command(work: Path, url: str, inputs: Path) -> list[str]:
    """Bespoke Curator over the same input and body, the same calls in flight in all, its
    limiter given the endpoint's limits per minute; its cache under ``work``, so a rerun
    after a kill resumes and every run starts from an empty one."""
    command = [curator_python(), "-m", "benchmarks.model_curator", "--base-url", url]
    command += ["--input", str(inputs), "--output", str(work / "answers")]
    command += ["--body", json.dumps(chat_body()), "--calls-in-flight", str(2 * CAPACITY)]
    per_minute = 60 / WINDOW_S
    command += ["--requests-per-minute", str(math.floor(REQUESTS * per_minute))]
    command += ["--tokens-per-minute", str(math.floor(TOKENS * per_minute))]
    return [*command, "--cache-dir", str(work / "curator-cache")]


def curator_python() -> str:
    return setting("BENCH_CURATOR_PYTHON", str(REPO / ".venv-curator" / "bin" / "python"))


def jvm_class_archive() -> str:
    """Whether the job's driver JVM maps its class archive (``make bench-model`` writes it
    first): ``none`` when it is off or not written."""
    return "none" if class_archive() is None else "mapped"


def not_installed(python: str, module: str, target: str) -> str | None:
    """Why ``python`` cannot import ``module`` (the contender is not installed), or None."""
    if not Path(python).exists():
        return f"no environment at {python} (make {target} builds it)"
    check = subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True)
    if check.returncode:
        lines = check.stderr.strip().splitlines() or [f"exit {check.returncode}"]
        return f"{python} cannot import {module}: {lines[-1]}"
    return None


def dead_letters(work: Path) -> int:
    if (work / "ray").exists():
        return 0  # Ray's HTTP processor fails the run instead of keeping a failed row
    if (work / "answers").exists():
        return unanswered(pq.read_table(work / "answers").column("answer").to_pylist(), RECORDS)
    return int(json.loads((work / "out" / "_SUMMARY.json").read_text())["dead_letters"])


def unanswered(answers: list[Any], records: int) -> int:
    """Records without an answer: a null answer (the recipe's and Daft's failed rows) or
    no row at all (Curator leaves a row whose retries ran out out)."""
    return records - sum(1 for answer in answers if answer is not None)


def run_once(command: list[str]) -> float:
    """Run to the end, or for ``TIMEOUT_S`` at most; its wall time."""
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        raise RuntimeError(f"killed after {TIMEOUT_S:g} s: {output[-3000:]}") from None
    if process.returncode != 0:
        raise RuntimeError(output[-6000:])
    return time.monotonic() - started


def kill_at_half_and_rerun(command: list[str], control: str) -> dict[str, Any]:
    """Kill the run (its process group, JVM and workers) once half the records are paid
    for, run it again to the end; what the second run paid again, and the records/s of
    both runs together (the second started as soon as the first was dead)."""
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    tree = TreeSampler(process.pid, period=0.1).start()  # Ray's daemons leave the group
    while _stats(control).get("prompts", 0) < RECORDS // 2 and process.poll() is None:
        time.sleep(0.2)
    paid_at_kill = _stats(control).get("prompts", 0)
    tree.stop()
    os.killpg(process.pid, signal.SIGKILL)
    for pid in tree.procs:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait(timeout=60)
    seconds = time.monotonic() - started + run_once(command)
    stats = _stats(control)
    with urllib.request.urlopen(control + "/calls") as answer:
        calls_by_prompt = json.load(answer)
    return {
        "seconds_both_runs": round(seconds, 1),
        "records_per_s_both_runs": round(RECORDS / seconds, 2),
        "prompts_paid_at_kill": paid_at_kill,
        "prompts_paid_again": record_prompts_paid_again(calls_by_prompt),
        "calls_beyond_one_per_record": stats["requests"] - stats.get("throttled", 0) - RECORDS,
    }


def _stats(control: str) -> dict[str, Any]:
    with urllib.request.urlopen(control + "/stats") as answer:
        return dict(json.load(answer))


RECORD_PROMPT = re.compile(r"message number \d+")
"""What marks a record's prompt (``write_input``'s titles), in whatever form a contender
sends the message."""


def record_prompts_paid_again(calls_by_prompt: dict[str, int]) -> int:
    """Records' prompts answered more than once. A framework's own calls (Curator's
    rate-limit probe and structured-output check, sent by each run) are no record's."""
    return sum(
        1 for prompt, calls in calls_by_prompt.items() if calls > 1 and RECORD_PROMPT.search(prompt)
    )


Command = Callable[[Path, str, Path], list[str]]
"""A contender's command line, given its work folder, the endpoint's URL and the input."""


@dataclass(frozen=True)
class Contender:
    name: str
    """The name it is reported under."""
    command: Command
    installed_in: tuple[Callable[[], str], str, str] | None
    """Where it runs when not in the project's environment: that environment's Python, the
    module whose import says the contender is installed there, the make target that
    builds it."""
    resumes: bool
    """Whether a run killed at half is run again (``KILL``): for a contender that keeps what
    it was paid for, and for the recipe, to show what keeping nothing costs."""
    log: str | None = None
    """A log under its work folder (a glob) whose end a failure is reported with: where a
    contender writes why its calls fail (Curator: only to its cache's log)."""


CONTENDERS: dict[str, Contender] = {
    "job": Contender("enrich_job", job_command, None, True),
    "recipe": Contender("mapInArrow recipe", recipe_command, None, True),
    "ray": Contender(
        "Ray Data (ray.data.llm)", ray_command, (bench_python, "ray.data.llm", "bench-venv"), True
    ),
    "daft": Contender(
        "Daft prompt()", daft_command, (bench_python, "daft.functions.ai", "bench-venv"), False
    ),
    "curator": Contender(
        "Bespoke Curator",
        curator_command,
        (curator_python, "bespokelabs.curator", "bench-venv-curator"),
        True,
        "curator-cache/*/curator.log",
    ),
}
"""By the names ``BENCH_MODEL_CONTENDERS`` takes (comma-separated; all by default, and only
a run of all is written to ``RESULTS``)."""
CHOSEN = os.environ.get("BENCH_MODEL_CONTENDERS", ",".join(CONTENDERS)).split(",")


def main() -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    results: dict[str, Any] = {
        "profile": PROFILE,
        "window_s": WINDOW_S,
        "windows_from_first_call": ALIGN,
        "tokens_per_window": TOKENS,
        "requests_per_window": REQUESTS,
        "records": RECORDS,
        "latency_s": LATENCY_S,
        "capacity_per_partition": CAPACITY,
        "partitions": 2,
        "job_jvm_class_archive": jvm_class_archive(),
        "job_jvm_jit": os.environ.get("ENRICH_JVM_JIT", "").strip().lower() or "full",
    }
    if unknown := set(CHOSEN) - set(CONTENDERS):
        raise SystemExit(f"BENCH_MODEL_CONTENDERS: no {sorted(unknown)}; from {list(CONTENDERS)}")
    with tempfile.TemporaryDirectory() as temp:
        inputs = write_input(Path(temp) / "in")
        for contender in (CONTENDERS[chosen] for chosen in CHOSEN):
            work = Path(temp) / re.sub(r"\W+", "_", contender.name)
            results[contender.name] = run_contender(contender, work, inputs)
            print(contender.name, json.dumps(results[contender.name], sort_keys=True), flush=True)
    if set(CHOSEN) == set(CONTENDERS):
        RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(table(results))
    return 0


def run_contender(contender: Contender, work: Path, inputs: Path) -> dict[str, Any]:
    """A contender measured, or why it could not be (reported, never skipped in silence)."""
    if contender.installed_in:
        python, module, target = contender.installed_in
        if reason := not_installed(python(), module, target):
            return {"not_installed": reason}
    return measure(contender, work, inputs)


def measure(contender: Contender, work: Path, inputs: Path) -> dict[str, Any]:
    """One contender: an unbroken run, then (``KILL``, and it resumes) a run killed at half
    and rerun. A run that fails (Ray's, once a row's retries run out) is reported, not
    measured."""
    build = contender.command
    with endpoint() as (url, control):
        try:
            seconds = run_once(build(work, url, inputs))
        except RuntimeError as failure:
            logs = sorted(work.glob(contender.log)) if contender.log else []
            said = {"log": logs[-1].read_text()[-1500:]} if logs else {}
            return {"failed": str(failure)[-600:], **said, **limit_use(control)}
        measured: dict[str, Any] = {"seconds": round(seconds, 1)}
        measured["records_per_s"] = round(RECORDS / seconds, 2)
        measured["dead_letters"] = dead_letters(work)
        measured.update(limit_use(control))
    if KILL and not contender.resumes:
        measured["kill_at_half"] = "not run: it keeps nothing between runs"
    elif KILL:
        with endpoint() as (url, control):
            measured["kill_at_half"] = kill_at_half_and_rerun(
                build(work / "killed", url, inputs), control
            )
    return measured


def table(results: dict[str, Any]) -> str:
    rows = [
        "| run | records/s (wall) | records/s (calling) | token limit used after the first "
        "window | 429 share | dead letters | paid again after a kill at 50 % | "
        "records/s, killed at 50 % and run again |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in (contender.name for contender in CONTENDERS.values()):
        r = results.get(name, {})
        if "not_installed" in r:
            rows.append(f"| {name} | not installed: {r['not_installed']} | | | | | | |")
        elif "failed" in r:
            share = f"{r['share_429'] * 100:.1f} %" if "share_429" in r else "no call"
            rows.append(f"| {name} | the run failed | | | {share} | | | |")
        elif r:
            rows.append(measured_row(name, r))
    return "\n".join(rows)


def measured_row(name: str, r: dict[str, Any]) -> str:
    killed = r.get("kill_at_half", {})
    if isinstance(killed, str):  # not run, and why
        again = both = killed
    else:
        again = killed.get("prompts_paid_again", "not run")
        both = killed.get("records_per_s_both_runs", "not run")
    return (
        f"| {name} | {r['records_per_s']} | {r['records_per_s_calling']} | "
        f"{r['token_limit_used']} | "
        f"{r['share_429'] * 100:.1f} % | {r['dead_letters']} | {again} | {both} |"
    )


if __name__ == "__main__":
    sys.exit(main())
