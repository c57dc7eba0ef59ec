"""One request schedule for the tasks of an executor: a given rate follows the tasks that
are actually sending.

``--requests-per-second R`` is divided by the job's task slots ``S``; a task that sends
at most ``R/S`` alone leaves its slot's share unused whenever a neighbour on the same
executor is starting, ending or between tasks (with short tasks on ``local[2]``, half of
``R`` for seconds at a time). The tasks of one executor therefore pace together on one
GCRA schedule at the executor's share, ``R x slots / S``, kept in a small file that every
Python worker of the executor opens (they are children of one ``pyspark.daemon``). A task
alone on its executor may then send the executor's whole share.

The executor's slots are counted, not configured: each task holds an exclusive lock on
the lowest free ``slot-N`` file, so a task holding slot ``N`` proves ``N + 1`` tasks ran
at once; the schedule keeps the highest such count, which never exceeds the executor's
real slots, so the executors' shares never add up to more than ``R``. A killed worker's
locks go with it. Where the files cannot be used, each task keeps its own ``R/S``.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import struct
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

logger = logging.getLogger(__name__)

_RECORD = struct.Struct("<dq")  # the next free send time (monotonic), the slots seen
MAX_SLOTS = 1024
"""Slot files tried at most: more tasks than this on one executor share no further."""


class ExecutorSchedule:
    """The executor-wide send schedule of one job, shared through ``directory``."""

    def __init__(self, directory: Path, job_rate: float, job_slots: int) -> None:
        if not job_rate > 0 or job_slots < 1:
            raise ValueError(f"need a rate > 0 and slots >= 1, got {job_rate!r}, {job_slots!r}")
        directory.mkdir(parents=True, exist_ok=True)
        self._job_rate, self._job_slots = job_rate, job_slots
        self._slot_fd, slot = take_slot(directory)
        self._fd = os.open(directory / "schedule", os.O_RDWR | os.O_CREAT, 0o600)
        with self._locked() as (next_free, seen):
            self._write(next_free, max(seen, slot + 1))

    def reserve(self, not_before: float) -> float:
        """The executor's next send time at or after ``not_before`` (monotonic seconds,
        the same clock in every process of the host), taken."""
        with self._locked() as (next_free, seen):
            start = max(not_before, next_free)
            self._write(start + 1.0 / self._rate(seen), seen)
        return start

    def try_reserve(self, now: float) -> bool:
        """Take the executor's next send time only if it is free at ``now``."""
        with self._locked() as (next_free, seen):
            if next_free > now:
                return False
            self._write(now + 1.0 / self._rate(seen), seen)
        return True

    def close(self) -> None:
        """Give back this task's slot (its count stays: the slots are still there)."""
        for fd in (self._fd, self._slot_fd):
            os.close(fd)

    def _rate(self, seen: int) -> float:
        """The executor's share: ``R x slots seen / S``, at most ``R``."""
        return self._job_rate * min(max(seen, 1), self._job_slots) / self._job_slots

    @contextmanager
    def _locked(self) -> Iterator[tuple[float, int]]:
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            data = os.pread(self._fd, _RECORD.size, 0)
            yield _RECORD.unpack(data) if len(data) == _RECORD.size else (0.0, 0)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _write(self, next_free: float, seen: int) -> None:
        os.pwrite(self._fd, _RECORD.pack(next_free, seen), 0)


def take_slot(directory: Path) -> tuple[int, int]:
    """Lock the lowest free ``slot-N`` file; its descriptor and ``N``."""
    for slot in range(MAX_SLOTS):
        fd = os.open(directory / f"slot-{slot}", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return fd, slot
    raise OSError(f"all {MAX_SLOTS} slot files of {directory} are held")


def executor_directory(kind: str, key: str) -> Path | None:
    """The folder this executor's Python workers share for ``kind`` of file about ``key``,
    or None when the executor cannot be told apart (no ``/proc`` entry for the daemon)."""
    daemon = os.getppid()  # pyspark.daemon: one per executor (and per Spark application)
    try:
        born = os.stat(f"/proc/{daemon}").st_ctime  # a reused pid is another executor
    except OSError:
        return None
    digest = hashlib.sha256(f"{kind} {key}".encode()).hexdigest()[:16]
    folder = f"{daemon}-{born:.0f}-{digest}"
    return Path(tempfile.gettempdir()) / "resumable-enrichment-rate" / folder


def open_schedule(scope: str, job_rate: float, job_slots: int) -> ExecutorSchedule | None:
    """The schedule shared by this executor's tasks of the job ``scope`` (what the rate is
    counted against, and the rate and slots); None when there is nothing to share (one
    slot) or the files cannot be used (the task then keeps its own share)."""
    if job_slots < 2:
        return None
    directory = executor_directory("schedule", f"{scope} {job_rate!r} {job_slots}")
    if directory is None:
        return None
    try:
        return ExecutorSchedule(directory, job_rate, job_slots)
    except OSError as exc:
        logger.warning("request rate not shared with this executor's other tasks: %s", exc)
        return None
