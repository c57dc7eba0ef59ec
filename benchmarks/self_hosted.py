"""The model-endpoint enricher against a self-hosted server: the issue 40 cell.

Run with ``python -m benchmarks.self_hosted``. The demo model endpoint runs in its own
process with the ``self-hosted`` profile (``demo/batch_scheduler.py``: 8 requests decode
at once, the rest queue without limit, no rate headers, no 429; 0.095 s unloaded). The
enricher (no Spark: one partition's HTTP enricher under the async wait operator, capacity
64) enriches ``RECORDS`` records twice, each against a fresh server: with
``model.provider: self-hosted`` (the latency-guided concurrency, ``concurrency.py``) and
with the default provider (the fixed cap alone). Reported, from the server's own log of
calls between the first fifth of the answers and the last tenth: its throughput as a
share of its best (a full batch all the time) and the median latency as a multiple of
the unloaded one (targets: at least 0.9 and at most 1.5x), the most requests that waited
in its queue, and the requests sent per record. Results go to
``benchmarks/results/self_hosted.json``.
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp

from spark_jobs.asyncwait import AsyncWaitOperator, Result
from spark_jobs.enrichers import HttpEnricher, HttpEnricherConfig
from spark_jobs.enrichers.model_endpoint import (
    ModelAnswers,
    ModelConfig,
    ModelPacing,
    request_options,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "self_hosted.json"
RECORDS = 1500  # the run
CAPACITY = 64
BATCH = 8


@contextmanager
def endpoint() -> Iterator[str]:
    """A fresh self-hosted demo server in its own process; yields its base URL."""
    command = [sys.executable, "-m", "demo.model_api", "--port", "0"]
    command += ["--profile", "self-hosted", "--batch", str(BATCH)]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        match = re.search(r"http://\S+", process.stdout.readline() if process.stdout else "")
        assert match is not None, "the demo model endpoint did not start"
        yield match.group(0)
    finally:
        process.terminate()
        process.wait(timeout=30)


async def enrich(base_url: str, provider: str, records: int = RECORDS) -> dict[str, Any]:
    """Enrich ``records`` through one partition's enricher against the server at
    ``base_url``; what the server saw in the steady part, beside its yardsticks (also
    ``tests/integration/test_self_hosted_concurrency.py``'s measure)."""
    config = ModelConfig(model="local", prompt="Summarise ticket {id}", provider=provider)
    options: dict[str, Any] = {
        "url_template": base_url + "/chat/completions",
        "response_fields": {"unused": "$.unused"},
        "capacity": CAPACITY,
        "cache_size": 0,
    }
    options.update(request_options(config, options))
    http = HttpEnricherConfig.from_dict(options)
    pacing = ModelPacing(config, partitions=1)
    async with HttpEnricher(http, answers=ModelAnswers(config), pacing=pacing) as enricher:
        operator = AsyncWaitOperator(enricher, mode="unordered", capacity=CAPACITY)
        outputs = [o async for o in operator.run({"id": i} for i in range(records))][:-1]
        stats = enricher.stats
    control = base_url.removesuffix("/v1")
    async with aiohttp.ClientSession() as session:
        async with session.get(control + "/timeline") as answer:
            calls = (await answer.json())["calls"]
        async with session.get(control + "/stats") as answer:
            server = (await answer.json())["self_hosted"]
    ends = sorted(call["at"] + call["latency_s"] for call in calls)
    calls.sort(key=lambda call: call["at"] + call["latency_s"])
    first, last = len(ends) // 5, len(ends) * 9 // 10
    throughput = (last - first) / (ends[last] - ends[first])
    median = statistics.median(call["latency_s"] for call in calls[first:last])
    return {
        "provider": provider,
        "records": sum(isinstance(o, Result) for o in outputs),
        "requests_per_record": round(stats.requests_made / records, 3),
        "concurrency_limit_at_end": stats.current_concurrency_limit,
        "throughput_share_of_best": round(throughput / server["best_requests_per_s"], 3),
        "median_latency_x_unloaded": round(median / server["unloaded_latency_s"], 2),
        "max_waiting": server["max_waiting"],
        "unloaded_latency_s": server["unloaded_latency_s"],
        "best_requests_per_s": server["best_requests_per_s"],
    }


def main() -> int:
    rows = []
    for provider in ("self-hosted", "openai"):
        with endpoint() as base_url:
            rows.append(asyncio.run(enrich(base_url, provider)))
        print(json.dumps(rows[-1]), flush=True)
    RESULTS.write_text(json.dumps({"batch": BATCH, "capacity": CAPACITY, "runs": rows}, indent=2))
    latency = rows[0]
    met = latency["throughput_share_of_best"] >= 0.9 and latency["median_latency_x_unloaded"] <= 1.5
    print(f"self-hosted targets (>= 0.9 of best, <= 1.5x unloaded): {'met' if met else 'MISSED'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
