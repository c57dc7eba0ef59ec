"""CPU and memory of one cell's process tree, sampled from Linux ``/proc``.

Every cell runs as one driver process (the job's ``python -m spark_jobs.enrich_job``, a
peer's ``python -m benchmarks.peers...``); Spark's JVM, its Python workers, Ray's raylet
and its workers all descend from it. A thread samples the tree every ``period`` seconds
and keeps each process's last CPU time (user + system) and largest RSS. At the end:

- ``python_cpu_s()``: the driver's CPU plus every Python *worker*'s: Spark's
  ``pyspark.daemon`` and the workers it forks, Ray's ``default_worker.py`` processes
  (actors and tasks). The JVM, Ray's raylet/GCS and Ray's own Python helpers (dashboard
  agent, log monitor) are infrastructure and not in it; ``all_cpu_s()`` has them too.
- ``worker_peak_rss_mb()``: the largest RSS one Python worker reached.

A process's CPU after its last sample (at most ``period``, at shutdown) is missed; a
process's own counters are read, never its children's (``cutime``), which would count
the JVM into the driver.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICK = os.sysconf("SC_CLK_TCK")
_WORKER_MARKS = (b"pyspark.daemon", b"pyspark/daemon.py", b"default_worker.py")
#: Ray's own actors and agents: Python processes, but infrastructure like Spark's JVM.
_RAY_INFRA = (
    b"ray::DashboardAgent",
    b"ray::RuntimeEnvAgent",
    b"ray::_StatsActor",
    b"ray::_AutoscalingCoordinatorActor",
    b"ray::ActorLocationTracker",
)


@dataclass
class _Proc:
    cpu_s: float = 0.0
    rss_mb: float = 0.0
    worker: bool = False


@dataclass
class TreeSampler:
    """Samples the tree under ``root`` (a pid) from ``start()`` to ``stop()``."""

    root: int
    period: float = 0.2
    procs: dict[int, _Proc] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> TreeSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Idempotent: the last sample stays."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.period)

    def sample(self) -> None:
        parents: dict[int, int] = {}
        stats: dict[int, list[bytes]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as stat:
                    raw = stat.read()
            except OSError:
                continue
            # Fields after the command name, which may hold spaces: state is index 0.
            rest = raw[raw.rindex(b")") + 2 :].split()
            pid = int(entry)
            parents[pid] = int(rest[1])
            stats[pid] = rest
        for pid in [self.root, *_descendants(self.root, parents)]:
            if pid not in stats:
                continue
            rest = stats[pid]
            proc = self.procs.setdefault(pid, _Proc())
            worker = _is_worker(pid)  # again each time: Ray renames its workers
            if worker is not None:
                proc.worker = worker
            proc.cpu_s = (int(rest[11]) + int(rest[12])) / _TICK
            proc.rss_mb = max(proc.rss_mb, int(rest[21]) * _PAGE / 2**20)

    def python_cpu_s(self) -> float:
        """The driver's CPU and the Python workers'."""
        return sum(p.cpu_s for pid, p in self.procs.items() if p.worker or pid == self.root)

    def driver_cpu_s(self) -> float:
        """The driver's own share of ``python_cpu_s``: set-up, Spark actions, bookkeeping."""
        return self.procs[self.root].cpu_s if self.root in self.procs else 0.0

    def all_cpu_s(self) -> float:
        return sum(p.cpu_s for p in self.procs.values())

    def worker_peak_rss_mb(self) -> float:
        return max((p.rss_mb for p in self.procs.values() if p.worker), default=0.0)


def _descendants(root: int, parents: dict[int, int]) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _is_worker(pid: int) -> bool | None:
    """None when the process is gone (or a zombie) and its command line unreadable."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            command = cmdline.read()
    except OSError:
        return None
    if not command:
        return None
    if command.startswith(_RAY_INFRA):
        return False
    return command.startswith(b"ray::") or any(mark in command for mark in _WORKER_MARKS)
