"""HTTP enrichment throughput: the operator + HttpEnricher against the HTTP stack's ceiling.

Run with ``make bench-http`` (``python -m benchmarks.http_throughput``). The demo API
runs as a separate process (``python -m demo.api --latency-ms 50``) on a free loopback
port, so its CPU is not charged to the client. For each capacity, three contenders send
the same number of requests for unique ids (no cache or coalescing help):

- ``operator_http``: AsyncWaitOperator (ordered, default retry strategy) + HttpEnricher;
- ``raw_aiohttp``: a semaphore and ``gather`` over one aiohttp session, same concurrency,
  parsing the same fields: the ceiling of the HTTP stack;
- ``thread_pool_requests``: a ThreadPoolExecutor of the sync ``requests`` client with as
  many threads (one session per thread).

Reported per contender: records_per_s and the client process's CPU seconds per 1000
requests (``time.process_time``, all threads); per capacity, ``ratio_to_raw_aiohttp`` of
the operator (target >= 0.9). Results go to ``benchmarks/results/http.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import requests

from spark_jobs.asyncwait import AsyncWaitOperator, Result
from spark_jobs.enrichers import HttpEnricher, HttpEnricherConfig, default_retry_strategy

RESULTS = Path(__file__).parent / "results" / "http.json"
REPO_ROOT = Path(__file__).resolve().parents[1]
CAPACITIES = (100, 500)
FIELDS = {"name": "$.name", "city": "$.address.city", "score": ["$.score", "float"]}
_READY_TIMEOUT_S = 15.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def demo_api_process(latency_ms: float) -> Iterator[str]:
    """``python -m demo.api`` in its own process; stopped on exit, also on error."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "demo.api",
        "--port",
        str(port),
        "--latency-ms",
        str(latency_ms),
    ]
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            base_url = f"http://127.0.0.1:{port}"
            _wait_until_healthy(base_url, process, log)
            yield base_url
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_until_healthy(base_url: str, process: subprocess.Popen, log: Any) -> None:
    deadline = time.monotonic() + _READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            output = log.read().decode(errors="replace")
            raise RuntimeError(f"demo API exited with {process.returncode}:\n{output}")
        try:
            with urllib.request.urlopen(base_url + "/health", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"demo API not healthy at {base_url} after {_READY_TIMEOUT_S}s")


def pick(data: dict[str, Any]) -> tuple[Any, ...]:
    """The same fields the enricher extracts, for the baselines' equal work."""
    return data["name"], data["address"]["city"], float(data["score"])


# -- contenders: each returns how many requests succeeded --------------------------------


async def operator_http(base_url: str, ids: list[str], capacity: int) -> int:
    config = HttpEnricherConfig(
        url_template=base_url + "/customers/{id}", response_fields=FIELDS, capacity=capacity
    )
    ok = 0
    async with HttpEnricher(config) as enrich:
        operator = AsyncWaitOperator(enrich, capacity=capacity, retry=default_retry_strategy())
        async for output in operator.run({"id": i} for i in ids):
            ok += isinstance(output, Result)
    return ok


async def raw_aiohttp(base_url: str, ids: list[str], capacity: int) -> int:
    connector = aiohttp.TCPConnector(limit=capacity, limit_per_host=capacity)
    semaphore = asyncio.Semaphore(capacity)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(customer_id: str) -> bool:
            async with semaphore, session.get(f"{base_url}/customers/{customer_id}") as response:
                pick(await response.json())
                return response.status == 200

        return sum(await asyncio.gather(*(one(i) for i in ids)))


def thread_pool_requests(base_url: str, ids: list[str], capacity: int) -> int:
    local = threading.local()

    def one(customer_id: str) -> bool:
        session = getattr(local, "session", None)
        if session is None:
            session = local.session = requests.Session()
        response = session.get(f"{base_url}/customers/{customer_id}", timeout=30)
        pick(response.json())
        return response.status_code == 200

    with ThreadPoolExecutor(max_workers=capacity) as pool:
        return sum(pool.map(one, ids))


def measure(run: Callable[[], int], n: int) -> dict[str, Any]:
    wall, cpu = time.perf_counter(), time.process_time()
    ok = run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "requests": n,
        "succeeded": ok,
        "seconds": round(wall, 3),
        "records_per_s": round(n / wall, 1),
        "cpu_s_per_1000": round(cpu / n * 1000, 4),
    }


def bench_capacity(base_url: str, capacity: int, n: int) -> dict[str, Any]:
    def ids(prefix: str) -> list[str]:
        return [f"{prefix}-{capacity}-{i}" for i in range(n)]

    raw_ids, op_ids, thread_ids = ids("raw"), ids("op"), ids("thr")
    results = {
        "raw_aiohttp": measure(lambda: asyncio.run(raw_aiohttp(base_url, raw_ids, capacity)), n),
        "operator_http": measure(lambda: asyncio.run(operator_http(base_url, op_ids, capacity)), n),
        "thread_pool_requests": measure(
            lambda: thread_pool_requests(base_url, thread_ids, capacity), n
        ),
    }
    ratio = results["operator_http"]["records_per_s"] / results["raw_aiohttp"]["records_per_s"]
    return {
        "operator_http": results["operator_http"],
        "raw_aiohttp": results["raw_aiohttp"],
        "thread_pool_requests": results["thread_pool_requests"],
        "ratio_to_raw_aiohttp": round(ratio, 3),
    }


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "aiohttp": aiohttp.__version__,
        "requests": requests.__version__,
        "event_loop": "asyncio (default)",
    }


def print_table(report: dict[str, Any]) -> None:
    print(f"{'capacity':>8}  {'contender':<22}{'records/s':>11}{'CPU s/1000':>12}{'ok':>8}")
    for capacity in CAPACITIES:
        section = report[f"capacity_{capacity}"]
        for name in ("operator_http", "raw_aiohttp", "thread_pool_requests"):
            row = section[name]
            print(
                f"{capacity:>8}  {name:<22}{row['records_per_s']:>11.1f}"
                f"{row['cpu_s_per_1000']:>12.4f}{row['succeeded']:>8}"
            )
        print(
            f"{capacity:>8}  {'ratio_to_raw_aiohttp':<22}{section['ratio_to_raw_aiohttp']:>11.3f}"
        )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=15_000, help="per contender and capacity")
    parser.add_argument("--latency-ms", type=float, default=50.0, help="demo API latency")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    report: dict[str, Any] = {}
    with demo_api_process(args.latency_ms) as base_url:
        for capacity in CAPACITIES:
            report[f"capacity_{capacity}"] = bench_capacity(base_url, capacity, args.requests)
    report["machine"] = machine()
    report["settings"] = {"requests": args.requests, "latency_ms": args.latency_ms}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print_table(report)
    print(f"written to {args.output}")
    return report


if __name__ == "__main__":
    main()
