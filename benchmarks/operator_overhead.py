"""Operator benchmark: per-element overhead and Little's-law efficiency.

Run with ``make bench-operator``. Both figures are ratios measured side by side in one
run, so they hold on any machine. The headline figures use uvloop, the event loop the
partition runner runs on; the standard-library loop is measured too and reported beside
them (its epoll timeout rounds up to whole milliseconds, which alone costs about 10 % of
a 10 ms call, for the baseline as much as for the operator).

- ``overhead_ratio``: operator seconds per element / plain-asyncio seconds per element,
  with a zero-latency function and the same capacity (target <= 2).
- ``littles_law_ratio``: measured throughput / (capacity / latency) with a 10 ms
  function at capacity 100, i.e. against 10 000 elements per second (target >= 0.9).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import uvloop

from spark_jobs.asyncwait import AsyncWaitOperator

RESULTS = Path(__file__).parent / "results" / "operator.json"


async def instant(record: int) -> int:
    return record


async def plain_asyncio_window(fn, n: int, capacity: int) -> int:
    """The baseline: at most ``capacity`` tasks at once, results collected as they finish."""
    window: set[asyncio.Task[int]] = set()
    done_count = 0
    for record in range(n):
        if len(window) >= capacity:
            done, window = await asyncio.wait(window, return_when=asyncio.FIRST_COMPLETED)
            done_count += sum(1 for task in done if task.result() is not None)
        window.add(asyncio.create_task(fn(record)))
    done_count += sum(1 for result in await asyncio.gather(*window) if result is not None)
    return done_count


async def operator_run(fn, n: int, capacity: int, mode: str = "ordered") -> int:
    op = AsyncWaitOperator(fn, mode=mode, capacity=capacity)
    count = 0
    async for _ in op.run(range(n)):
        count += 1
    return count - 1  # the final watermark


Runner = Callable[[Coroutine[Any, Any, Any]], Any]
LOOPS: dict[str, Runner] = {"uvloop": uvloop.run, "asyncio": asyncio.run}


def timed(runner: Runner, coro_factory) -> float:
    started = time.perf_counter()
    runner(coro_factory())
    return time.perf_counter() - started


def best_of(repeats: int, runner: Runner, coro_factory) -> float:
    return min(timed(runner, coro_factory) for _ in range(repeats))


def measure(runner: Runner, args: argparse.Namespace) -> dict[str, float]:
    n, capacity, repeats = args.elements, args.capacity, args.repeats
    baseline_s = best_of(repeats, runner, lambda: plain_asyncio_window(instant, n, capacity))
    ordered_s = best_of(repeats, runner, lambda: operator_run(instant, n, capacity))
    unordered_s = best_of(repeats, runner, lambda: operator_run(instant, n, capacity, "unordered"))
    latency = args.latency_ms / 1000

    async def sleeper(record: int) -> int:
        await asyncio.sleep(latency)
        return record

    m = args.latency_elements
    operator_rate = m / timed(runner, lambda: operator_run(sleeper, m, capacity))
    baseline_rate = m / timed(runner, lambda: plain_asyncio_window(sleeper, m, capacity))
    bound = capacity / latency
    return {
        "baseline_us_per_element": baseline_s / n * 1e6,
        "operator_ordered_us_per_element": ordered_s / n * 1e6,
        "operator_unordered_us_per_element": unordered_s / n * 1e6,
        "overhead_ratio": max(ordered_s, unordered_s) / baseline_s,
        "littles_law_bound_per_s": bound,
        "operator_per_s": operator_rate,
        "baseline_per_s": baseline_rate,
        "littles_law_ratio": operator_rate / bound,
        "baseline_littles_law_ratio": baseline_rate / bound,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=200_000, help="zero-latency run size")
    parser.add_argument("--capacity", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3, help="best of N per contender")
    parser.add_argument("--latency-ms", type=float, default=10.0)
    parser.add_argument("--latency-elements", type=int, default=30_000)
    args = parser.parse_args(argv)
    per_loop = {name: measure(runner, args) for name, runner in LOOPS.items()}
    headline = per_loop["uvloop"]
    results = {
        "overhead_ratio": headline["overhead_ratio"],
        "littles_law_ratio": headline["littles_law_ratio"],
        "elements": args.elements,
        "capacity": args.capacity,
        "latency_ms": args.latency_ms,
        "loops": per_loop,
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"{'':22}{'uvloop':>10}{'asyncio':>10}")
    rows = [
        ("plain window us/elem", "baseline_us_per_element", ".2f"),
        ("operator ordered", "operator_ordered_us_per_element", ".2f"),
        ("operator unordered", "operator_unordered_us_per_element", ".2f"),
        ("overhead_ratio", "overhead_ratio", ".2f"),
        ("10ms fn: operator /s", "operator_per_s", ".0f"),
        ("10ms fn: baseline /s", "baseline_per_s", ".0f"),
        ("littles_law_ratio", "littles_law_ratio", ".3f"),
    ]
    for label, key, fmt in rows:
        values = "".join(f"{per_loop[loop][key]:>10{fmt}}" for loop in LOOPS)
        print(f"{label:22}{values}")
    print(
        f"headline (uvloop): overhead_ratio {results['overhead_ratio']:.2f} (target <= 2), "
        f"littles_law_ratio {results['littles_law_ratio']:.3f} (target >= 0.9)"
    )
    print(f"written to {RESULTS}")
    return results


if __name__ == "__main__":
    main()
