"""The measuring parts of ``make bench-peers``: the API counts what it answers, the
process-tree sampler charges a Python worker's CPU and memory to its cell, and a cell run
in rounds is reported by its median round."""

from __future__ import annotations

import subprocess
import sys
import urllib.request

from benchmarks.peers.measure import TreeSampler
from benchmarks.peers.run import api, median_round

# A child that looks like a Spark Python worker (its command line names pyspark.daemon),
# burns CPU for a while and holds 50 MB.
WORKER = (
    "import time; block = bytearray(50 * 2**20); end = time.process_time() + 0.6\n"
    "while time.process_time() < end: pass\n"
)
DRIVER = (
    f"import subprocess, sys; subprocess.run([sys.executable, '-c', {WORKER!r}, 'pyspark.daemon'])"
)


def test_the_api_counts_every_answer_and_times_the_first_and_last() -> None:
    with api(1) as server:
        for i in range(20):
            with urllib.request.urlopen(f"{server.url}/items/k{i}", timeout=10) as response:
                assert response.status == 200
        stats = server.stats()
        assert stats["requests"] == 20
        assert stats["last"] - stats["first"] >= 20 * 0.001
        server.reset()
        assert server.stats()["requests"] == 0


def test_the_sampler_charges_a_python_workers_cpu_and_memory_to_the_cell() -> None:
    process = subprocess.Popen([sys.executable, "-c", DRIVER])
    sampler = TreeSampler(process.pid, period=0.05).start()
    process.wait()
    sampler.stop()
    assert sampler.python_cpu_s() >= 0.4  # the worker's 0.6 s, less at most one period
    assert sampler.worker_peak_rss_mb() >= 50
    assert sampler.all_cpu_s() >= sampler.python_cpu_s()


def test_a_cell_run_in_rounds_is_its_median_round_with_every_round_kept() -> None:
    rounds = [
        {"engine": "job_10s", "records_per_s": rate, "wall_s": wall, "cpu_s_per_1k": cpu}
        for rate, wall, cpu in ((13_353, 25.9, 0.096), (15_805, 23.2, 0.086), (15_730, 23.3, 0.087))
    ]
    cell = median_round(rounds)
    assert (cell["records_per_s"], cell["wall_s"], cell["cpu_s_per_1k"]) == (15_730, 23.3, 0.087)
    assert cell["rounds"] == [
        {k: r[k] for k in ("records_per_s", "wall_s", "cpu_s_per_1k")} for r in rounds
    ]
    assert "rounds" not in rounds[2]  # the measured rounds are left as they were
    assert median_round(rounds[:2])["records_per_s"] == 13_353  # even: the lower middle
    assert "rounds" not in median_round(rounds[:1])
