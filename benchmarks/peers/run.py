"""``make bench-peers``: this job beside what users would write instead, one cell at a time.

Every cell enriches the same generated Parquet input (``id``, ``amount``) on Spark
``local[2]`` with 2 partitions (Ray: 2 actors), against the neutral API of ``server.py``
(its own process, a fixed delay), extracting the same three fields and writing Parquet:

- ``job_10s``, ``job_1s``: this job through its entry point (``python -m
  spark_jobs.enrich_job``), ``--capacity C``, snapshots every 10 s and every 1 s;
- ``recipe``, ``arrow_udf``, ``thread_pool``: ``spark_peers.py``;
- ``ray_data``: ``ray_peer.py``, in the benchmark environment ``.venv-bench`` (skipped,
  saying why, when Ray cannot be imported there).

A cell is one process tree: its wall time is the driver's, start-up included; records/s is
measured at the server (records over first request to last answer); CPU and the Python
workers' peak RSS come from ``measure.py``. The cells of one invocation run back to back,
so compare them as ratios. Sizes come from the environment:

``BENCH_RECORDS`` (2 ms cells, default 200 000), ``BENCH_SLOW_SECONDS`` (100 ms cells get
the records the Little's-law bound serves in that many seconds, default 10, at most
``BENCH_RECORDS``), ``BENCH_ENGINES``, ``BENCH_DELAYS``, ``BENCH_CAPACITIES`` (comma
lists), ``BENCH_ROUNDS`` (each cell that many times, the engines taking turns round by
round, default 1: on a shared machine one run of a cell varies by 10 % and more; the JSON
keeps the round with the median records/s and every round's figures under ``rounds``),
``BENCH_PYTHON`` (the benchmark interpreter), ``BENCH_RESULTS`` (the JSON file; cells of
earlier runs with other keys stay in it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.peers.fields import JOB_FIELDS
from benchmarks.peers.measure import TreeSampler

REPO = Path(__file__).resolve().parents[2]
RESULTS = Path(os.environ.get("BENCH_RESULTS", REPO / "benchmarks" / "results" / "peers.json"))
PARTITIONS = 2
ENGINES = ("job_10s", "job_1s", "recipe", "arrow_udf", "thread_pool", "ray_data")
SPARK_PEERS = ("recipe", "arrow_udf", "thread_pool")


def setting(name: str, default: str) -> str:
    return os.environ.get(name, default)


def int_list(name: str, default: str) -> list[int]:
    return [int(v) for v in setting(name, default).split(",") if v]


def bench_python() -> str:
    return setting("BENCH_PYTHON", str(REPO / ".venv-bench" / "bin" / "python"))


def ray_missing() -> str | None:
    """Why the Ray cells cannot run here, or None."""
    python = bench_python()
    if not Path(python).exists():
        return f"no benchmark environment at {python} (make bench-venv builds it)"
    check = subprocess.run(
        [python, "-c", "import ray.data, aiohttp"], capture_output=True, text=True
    )
    if check.returncode:
        return f"{python} cannot import Ray Data: {check.stderr.strip().splitlines()[-1]}"
    return None


# -- the API and the input ----------------------------------------------------------------


class Api:
    """``server.py`` in its own process: its CPU never counts in a cell's tree."""

    def __init__(self, delay_ms: float) -> None:
        from demo.stack import free_port

        self.url = f"http://127.0.0.1:{free_port()}"
        port = self.url.rsplit(":", 1)[1]
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.peers.server",
                "--port",
                port,
                "--delay-ms",
                str(delay_ms),
            ],
            cwd=REPO,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                self.stats()
                return
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    raise RuntimeError("the benchmark API did not start") from None
                time.sleep(0.1)

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + "/stats", timeout=5) as response:
            return json.loads(response.read())

    def reset(self) -> None:
        request = urllib.request.Request(self.url + "/stats/reset", data=b"", method="POST")
        urllib.request.urlopen(request, timeout=5).close()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


@contextmanager
def api(delay_ms: float) -> Iterator[Api]:
    server = Api(delay_ms)
    try:
        yield server
    finally:
        server.stop()


def write_input(directory: Path, records: int) -> Path:
    """``records`` unique ids in files of 10 000 rows (Spark and Ray split on files)."""
    path = directory / f"in-{records}"
    if not path.exists():
        path.mkdir(parents=True)
        for start in range(0, records, 10_000):
            ids = range(start, min(records, start + 10_000))
            table = pa.table({"id": [f"k{i:08d}" for i in ids], "amount": list(ids)})
            pq.write_table(table, path / f"part-{start // 10_000:05d}.parquet")
    return path


# -- one cell ---------------------------------------------------------------------------------


def command(
    engine: str, url: str, capacity: int, data: Path, work: Path, records: int
) -> list[str]:
    if engine.startswith("job_"):
        interval = engine.removeprefix("job_").removesuffix("s")
        fields = [arg for f in JOB_FIELDS for arg in ("--response-field", f)]
        return [
            sys.executable, "-m", "spark_jobs.enrich_job",
            "--input", str(data), "--input-format", "parquet", "--output", str(work / "out"),
            "--key-column", "id", "--url-template", url + "/items/{id}", *fields,
            "--partitions", str(PARTITIONS), "--capacity", str(capacity),
            "--snapshot-dir", str(work / "snapshots"), "--snapshot-interval", interval,
            "--resume", "never",
        ]  # fmt: skip
    common = ["--url", url, "--capacity", str(capacity), "--input", str(data)]
    common += ["--output", str(work / "out")]
    if engine == "ray_data":
        return [
            bench_python(),
            "-m",
            "benchmarks.peers.ray_peer",
            *common,
            "--records",
            str(records),
        ]
    return [sys.executable, "-m", "benchmarks.peers.spark_peers", "--engine", engine, *common]


def run_cell(
    engine: str, server: Api, delay_ms: float, capacity: int, records: int, data: Path, work: Path
) -> dict[str, Any]:
    server.reset()
    env = {**os.environ, "SPARK_MASTER": f"local[{PARTITIONS}]", "PYTHONPATH": str(REPO)}
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    log = work / "log.txt"
    started = time.monotonic()
    with open(log, "wb") as out:
        process = subprocess.Popen(
            command(engine, server.url, capacity, data, work, records),
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        sampler = TreeSampler(process.pid).start()
        code = process.wait()
        sampler.stop()
    wall = time.monotonic() - started
    if code:
        tail = log.read_text(errors="replace")[-2000:]
        raise RuntimeError(
            f"{engine} (delay {delay_ms} ms, capacity {capacity}) exit {code}:\n{tail}"
        )
    stats = server.stats()
    served = (stats["last"] - stats["first"]) if stats["requests"] else float("nan")
    return {
        "engine": engine,
        "delay_ms": delay_ms,
        "capacity": capacity,
        "records": records,
        "records_per_s": round(records / served, 1),
        "wall_s": round(wall, 2),
        "cpu_s_per_1k": round(sampler.python_cpu_s() / records * 1000, 4),
        "peak_rss_mb": round(sampler.worker_peak_rss_mb(), 1),
        "requests": stats["requests"],
        "cpu_s_per_1k_all_processes": round(sampler.all_cpu_s() / records * 1000, 4),
        "driver_cpu_s": round(sampler.driver_cpu_s(), 2),
        "littles_law_bound_per_s": round(capacity * PARTITIONS / (delay_ms / 1000), 1),
        "load_1m_after": round(os.getloadavg()[0], 2),
    }


def cell_records(delay_ms: float, capacity: int) -> int:
    records = int(setting("BENCH_RECORDS", "200000"))
    if delay_ms < 10:
        return records
    seconds = float(setting("BENCH_SLOW_SECONDS", "10"))
    bound = capacity * PARTITIONS / (delay_ms / 1000)
    return min(records, max(1000, int(bound * seconds)))


# -- the matrix -------------------------------------------------------------------------------


def run(results: Path = RESULTS) -> list[dict[str, Any]]:
    engines = [e for e in setting("BENCH_ENGINES", ",".join(ENGINES)).split(",") if e]
    unknown = set(engines) - set(ENGINES)
    if unknown:
        raise SystemExit(f"BENCH_ENGINES: unknown {sorted(unknown)}; known: {ENGINES}")
    if "ray_data" in engines and (reason := ray_missing()):
        print(f"ray_data: skipped: {reason}", flush=True)
        engines.remove("ray_data")
    run_id = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:4]
    rounds = int(setting("BENCH_ROUNDS", "1"))
    cells: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp:
        for delay_ms in int_list("BENCH_DELAYS", "2,100"):
            with api(delay_ms) as server:
                for capacity in int_list("BENCH_CAPACITIES", "16,64,256"):
                    records = cell_records(delay_ms, capacity)
                    data = write_input(Path(tmp), records)
                    measured: dict[str, list[dict[str, Any]]] = {e: [] for e in engines}
                    for round_ in range(rounds):
                        for engine in engines:
                            work = Path(tmp) / f"{engine}-{delay_ms}-{capacity}-{round_}"
                            work.mkdir()
                            cell = run_cell(engine, server, delay_ms, capacity, records, data, work)
                            cell["run"] = run_id
                            measured[engine].append(cell)
                            print(row(cell), flush=True)
                    cells += [median_round(m) for m in measured.values()]
    save(cells, results)
    return cells


def median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the median records/s (the lower one of an even count), with every
    round's figures under ``rounds`` when there was more than one."""
    cell = dict(sorted(rounds, key=lambda c: c["records_per_s"])[(len(rounds) - 1) // 2])
    if len(rounds) > 1:
        figures = ("records_per_s", "wall_s", "cpu_s_per_1k")
        cell["rounds"] = [{k: c[k] for k in figures} for c in rounds]
    return cell


def save(cells: list[dict[str, Any]], results: Path) -> None:
    """Merge into ``results``: a cell replaces an earlier one with the same key."""

    def key(c: dict[str, Any]) -> tuple[Any, ...]:
        return c["engine"], c["delay_ms"], c["capacity"], c["records"]

    kept = json.loads(results.read_text()) if results.exists() else []
    new = {key(c) for c in cells}
    merged = [c for c in kept if key(c) not in new] + cells
    merged.sort(
        key=lambda c: (c["delay_ms"], c["records"], c["capacity"], ENGINES.index(c["engine"]))
    )
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps(merged, indent=1) + "\n")


HEADER = (
    f"{'engine':<12}{'delay ms':>9}{'capacity':>9}{'records':>9}{'records/s':>11}"
    f"{'bound/s':>10}{'wall s':>8}{'CPU s/1k':>10}{'RSS MB':>8}"
)


def row(c: dict[str, Any]) -> str:
    return (
        f"{c['engine']:<12}{c['delay_ms']:>9g}{c['capacity']:>9}{c['records']:>9}"
        f"{c['records_per_s']:>11.0f}{c['littles_law_bound_per_s']:>10.0f}{c['wall_s']:>8.1f}"
        f"{c['cpu_s_per_1k']:>10.3f}{c['peak_rss_mb']:>8.0f}"
    )


def main() -> int:
    print(HEADER, flush=True)
    cells = run()
    print("\n" + HEADER)
    for cell in cells:
        print(row(cell))
    print(f"written to {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
