"""Throughput against capacity, one panel per API delay, with the Little's-law bound.

``.venv-bench/bin/python -m benchmarks.peers.plot [RESULTS] [PNG]`` (matplotlib lives in the
benchmark environment). Per delay it draws the cells of the run that measured most cells
at that delay, so every line of a panel comes from one run (ratios, not absolutes, are
what a shared machine can measure). The bound is capacity x partitions / delay: the rate
at which that many calls in flight, each taking the delay, can complete.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.peers.run import PARTITIONS, REPO, RESULTS

PNG = REPO / "docs" / "peers.png"
LABELS = {
    "job_10s": "this job, snapshots every 10 s",
    "job_1s": "this job, snapshots every 1 s",
    "recipe": "mapInArrow + aiohttp + semaphore",
    "arrow_udf": "Arrow UDF, arrow.concurrency.level",
    "thread_pool": "mapPartitions + thread pool",
    "ray_data": "Ray Data map_batches, async actors",
}


def panels(cells: list[dict[str, Any]]) -> dict[float, list[dict[str, Any]]]:
    by_delay: dict[float, list[dict[str, Any]]] = {}
    for delay in sorted({c["delay_ms"] for c in cells}):
        at = [c for c in cells if c["delay_ms"] == delay]
        run, _ = Counter(c.get("run") for c in at).most_common(1)[0]
        by_delay[delay] = [c for c in at if c.get("run") == run]
    return by_delay


def main(argv: list[str]) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = Path(argv[0]) if argv else RESULTS
    png = Path(argv[1]) if len(argv) > 1 else PNG
    by_delay = panels(json.loads(results.read_text()))
    figure, axes = plt.subplots(1, len(by_delay), figsize=(6 * len(by_delay), 4.5), squeeze=False)
    for axis, (delay, cells) in zip(axes[0], by_delay.items(), strict=True):
        capacities = sorted({c["capacity"] for c in cells})
        bound = [c * PARTITIONS / (delay / 1000) for c in capacities]
        axis.plot(capacities, bound, "k--", label="Little's law: capacity x 2 / delay")
        for engine, label in LABELS.items():
            points = sorted(
                (c["capacity"], c["records_per_s"]) for c in cells if c["engine"] == engine
            )
            if points:
                axis.plot(*zip(*points, strict=True), marker="o", label=label)
        records = sorted({c["records"] for c in cells})
        axis.set_title(f"API delay {delay:g} ms ({', '.join(map(str, records))} records)")
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xticks(capacities, [str(c) for c in capacities])
        axis.set_xlabel("calls in flight per partition (capacity)")
        axis.set_ylabel("records/s at the server")
        axis.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7, loc="upper left")
    figure.suptitle("Spark local[2], 2 partitions (Ray: 2 actors), one run per panel")
    figure.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(png, dpi=110)
    print(f"plot written to {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
