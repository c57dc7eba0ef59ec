"""HTTP enrichment throughput: the operator + HttpEnricher against the HTTP stack's ceiling.

Run with ``make bench-http`` (``python -m benchmarks.http_throughput``). The demo API
runs as a separate process (``python -m demo.api --latency-ms 50``) on a free loopback
port, so its CPU is not charged to the client. For each capacity, the contenders send the
same number of requests for unique ids (no cache or coalescing help), interleaved in
rounds:

- ``operator_http``: AsyncWaitOperator (unordered, default retry strategy) + HttpEnricher.
  Unordered keeps exactly ``capacity`` calls in flight, like the baselines; ordered mode
  (``operator_http_ordered``, reported too) may hold finished records behind a slow
  head, which lowers the number in flight when latencies vary;
- ``raw_aiohttp``: a semaphore and ``gather`` over one aiohttp session, same concurrency,
  parsing the same fields: the ceiling of the HTTP stack;
- ``thread_pool_requests``: a ThreadPoolExecutor of the sync ``requests`` client with as
  many threads (one session per thread).

Reported per contender: records_per_s, the client process's CPU seconds per 1000
requests (``time.process_time``, all threads) and the mean number of requests in flight
(sampled every 5 ms: equal CPU but unequal throughput means unequal effective
concurrency); per capacity, ``ratio_to_raw_aiohttp`` of the operator (target >= 0.9)
and the same for ordered mode. ``--operator-capacity-factor`` gives the operator's queue
more room than the HTTP concurrency (the enricher's ``capacity`` still caps requests in
flight), because the operator holds a slot until a record is emitted, not just while
its call runs. Each contender first runs one unmeasured slice per capacity: the
connections, and the enricher's slow start, which only a worker's first partition of an
API pays (its successors start at the rate it reached, ``rate_sharing.py``), are not
what this measures. Results go to ``benchmarks/results/http.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
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


class InFlight:
    """Requests in flight, sampled every few milliseconds by a background thread.

    Equal CPU time but unequal throughput means unequal effective concurrency; the mean
    of these samples shows it. Reading an int from another thread is safe in CPython.
    """

    def __init__(self) -> None:
        self.count = 0
        self.read: Callable[[], int] = lambda: self.count
        self.lock = threading.Lock()  # for the thread pool's updates only
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.samples.append(self.read())

    def __enter__(self) -> InFlight:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


# -- contenders: each returns how many requests succeeded --------------------------------


async def operator_http(
    base_url: str, ids: list[str], capacity: int, gauge: InFlight, mode: str, factor: float
) -> int:
    """``factor`` sizes the operator's queue relative to the HTTP concurrency."""
    config = HttpEnricherConfig(
        url_template=base_url + "/customers/{id}", response_fields=FIELDS, capacity=capacity
    )
    ok = 0
    async with HttpEnricher(config) as enrich:
        gauge.read = lambda: enrich.stats.in_flight
        retry = default_retry_strategy()
        queue = max(capacity, round(capacity * factor))
        operator = AsyncWaitOperator(enrich, mode=mode, capacity=queue, retry=retry)
        async for output in operator.run({"id": i} for i in ids):
            ok += isinstance(output, Result)
    return ok


async def raw_aiohttp(base_url: str, ids: list[str], capacity: int, gauge: InFlight) -> int:
    connector = aiohttp.TCPConnector(limit=capacity, limit_per_host=capacity)
    semaphore = asyncio.Semaphore(capacity)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(customer_id: str) -> bool:
            async with semaphore:
                gauge.count += 1
                try:
                    async with session.get(f"{base_url}/customers/{customer_id}") as response:
                        pick(await response.json())
                        return response.status == 200
                finally:
                    gauge.count -= 1

        return sum(await asyncio.gather(*(one(i) for i in ids)))


def thread_pool_requests(base_url: str, ids: list[str], capacity: int, gauge: InFlight) -> int:
    local = threading.local()

    def one(customer_id: str) -> bool:
        session = getattr(local, "session", None)
        if session is None:
            session = local.session = requests.Session()
        with gauge.lock:
            gauge.count += 1
        try:
            response = session.get(f"{base_url}/customers/{customer_id}", timeout=30)
            pick(response.json())
            return response.status_code == 200
        finally:
            with gauge.lock:
                gauge.count -= 1

    with ThreadPoolExecutor(max_workers=capacity) as pool:
        return sum(pool.map(one, ids))


Contender = Callable[[str, list[str], int, InFlight], int]


def contenders(factor: float) -> dict[str, Contender]:
    def operator(mode: str) -> Contender:
        return lambda url, ids, c, gauge: asyncio.run(
            operator_http(url, ids, c, gauge, mode, factor)
        )

    return {
        "operator_http": operator("unordered"),
        "operator_http_ordered": operator("ordered"),
        "raw_aiohttp": lambda url, ids, c, gauge: asyncio.run(raw_aiohttp(url, ids, c, gauge)),
        "thread_pool_requests": thread_pool_requests,
    }


def bench_capacity(
    base_url: str, capacity: int, n: int, rounds: int, factor: float
) -> dict[str, Any]:
    """Each contender sends ``n`` requests, in ``rounds`` interleaved slices whose order
    rotates, so a machine getting busier or quieter during the run (other jobs, CPU
    boost) weighs on every contender alike instead of on whoever ran last."""
    runners = contenders(factor)
    names = list(runners)
    totals = {name: {"ok": 0, "wall": 0.0, "cpu": 0.0, "in_flight": []} for name in names}
    sizes = [n // rounds + (1 if r < n % rounds else 0) for r in range(rounds)]
    for name in names:  # warm-up, unmeasured
        runners[name](
            base_url, [f"warm-{name}-{capacity}-{i}" for i in range(sizes[0])], capacity, InFlight()
        )
    for r, size in enumerate(sizes):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            ids = [f"{name}-{capacity}-{r}-{i}" for i in range(size)]
            total = totals[name]
            with InFlight() as gauge:
                wall, cpu = time.perf_counter(), time.process_time()
                total["ok"] += runners[name](base_url, ids, capacity, gauge)
                total["wall"] += time.perf_counter() - wall
                total["cpu"] += time.process_time() - cpu
            total["in_flight"].extend(gauge.samples)
    section: dict[str, Any] = {
        name: {
            "requests": n,
            "succeeded": t["ok"],
            "seconds": round(t["wall"], 3),
            "records_per_s": round(n / t["wall"], 1),
            "cpu_s_per_1000": round(t["cpu"] / n * 1000, 4),
            "mean_in_flight": round(statistics.fmean(t["in_flight"] or [0]), 1),
        }
        for name, t in totals.items()
    }
    raw = section["raw_aiohttp"]["records_per_s"]
    section["ratio_to_raw_aiohttp"] = round(section["operator_http"]["records_per_s"] / raw, 3)
    ordered = section["operator_http_ordered"]["records_per_s"] / raw
    section["ordered_ratio_to_raw_aiohttp"] = round(ordered, 3)
    return section


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
    header = f"{'capacity':>8}  {'contender':<30}{'records/s':>11}{'CPU s/1000':>12}"
    print(header + f"{'in flight':>11}{'ok':>8}")
    for key, section in report.items():
        if not key.startswith("capacity_"):
            continue
        capacity = key.removeprefix("capacity_")
        for name, row in section.items():
            if isinstance(row, dict):
                print(
                    f"{capacity:>8}  {name:<30}{row['records_per_s']:>11.1f}"
                    f"{row['cpu_s_per_1000']:>12.4f}{row['mean_in_flight']:>11.1f}"
                    f"{row['succeeded']:>8}"
                )
        for name in ("ratio_to_raw_aiohttp", "ordered_ratio_to_raw_aiohttp"):
            print(f"{capacity:>8}  {name:<30}{section[name]:>11.3f}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000, help="per contender and capacity")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved slices per contender")
    parser.add_argument("--latency-ms", type=float, default=50.0, help="demo API latency")
    parser.add_argument(
        "--operator-capacity-factor",
        type=float,
        default=1.0,
        help="operator queue capacity / HTTP concurrency (default: %(default)s, equal)",
    )
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    report: dict[str, Any] = {}
    load_before = os.getloadavg()[0]
    with demo_api_process(args.latency_ms) as base_url:
        asyncio.run(raw_aiohttp(base_url, [f"warm-up-{i}" for i in range(1000)], 100, InFlight()))
        for capacity in CAPACITIES:
            section = bench_capacity(
                base_url, capacity, args.requests, args.rounds, args.operator_capacity_factor
            )
            report[f"capacity_{capacity}"] = section
    report["machine"] = {
        **machine(),
        # Other work on the machine skews every contender; the load average says how much.
        "load_average_1m_before": round(load_before, 2),
        "load_average_1m_after": round(os.getloadavg()[0], 2),
    }
    report["settings"] = {
        "requests": args.requests,
        "rounds": args.rounds,
        "latency_ms": args.latency_ms,
        "operator_capacity_factor": args.operator_capacity_factor,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print_table(report)
    print(f"written to {args.output}")
    return report


if __name__ == "__main__":
    main()
