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
locks go with it. The files live in the user's private folder (``private_dir.py``); where
they cannot be used, each task keeps its own ``R/S``. A schedule that is not what this
module writes (a torn or corrupt file) is replaced, with a warning naming it.
"""

from __future__ import annotations

import fcntl
import logging
import math
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager

from .private_dir import PrivateFolder, executor_folder

logger = logging.getLogger(__name__)

_RECORD = struct.Struct("<dq")  # the next free send time (monotonic), the slots seen
MAX_SLOTS = 1024
"""Slot files tried at most: more tasks than this on one executor share no further."""


class ExecutorSchedule:
    """The executor-wide send schedule of one job, shared through ``folder`` (closed
    here: the schedule holds what it needs of it)."""

    def __init__(self, folder: PrivateFolder, job_rate: float, job_slots: int) -> None:
        try:
            if not job_rate > 0 or job_slots < 1:
                raise ValueError(f"need a rate > 0 and slots >= 1, got {job_rate!r}, {job_slots!r}")
            self._job_rate, self._job_slots = job_rate, job_slots
            self._path = folder.path / "schedule"
            self._slot_fd, slot = take_slot(folder)
            self._fd = folder.open_file("schedule")
        finally:
            folder.close()
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
            yield self._read()
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _read(self) -> tuple[float, int]:
        """The schedule as written (new: none yet); one that is not a schedule counts as
        none, and the write that follows replaces it."""
        size = os.fstat(self._fd).st_size
        if size == 0:
            return 0.0, 0
        data = os.pread(self._fd, _RECORD.size, 0)
        if size == _RECORD.size and len(data) == _RECORD.size:
            next_free, seen = _RECORD.unpack(data)
            if math.isfinite(next_free) and next_free >= 0 and 0 <= seen <= MAX_SLOTS:
                return next_free, seen
        logger.warning("%s: not a send schedule (%d bytes); replacing it", self._path, size)
        os.ftruncate(self._fd, _RECORD.size)
        return 0.0, 0

    def _write(self, next_free: float, seen: int) -> None:
        os.pwrite(self._fd, _RECORD.pack(next_free, seen), 0)


def take_slot(folder: PrivateFolder) -> tuple[int, int]:
    """Lock the lowest free ``slot-N`` file of ``folder``; its descriptor and ``N``."""
    for slot in range(MAX_SLOTS):
        fd = folder.open_file(f"slot-{slot}")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return fd, slot
    raise OSError(f"all {MAX_SLOTS} slot files of {folder.path} are held")


def open_schedule(scope: str, job_rate: float, job_slots: int) -> ExecutorSchedule | None:
    """The schedule shared by this executor's tasks of the job ``scope`` (what the rate is
    counted against, and the rate and slots); None when there is nothing to share (one
    slot) or the files cannot be used (the task then keeps its own share)."""
    if job_slots < 2:
        return None
    try:
        folder = executor_folder("schedule", f"{scope} {job_rate!r} {job_slots}")
        return None if folder is None else ExecutorSchedule(folder, job_rate, job_slots)
    except OSError as exc:
        logger.warning("request rate not shared with this executor's other tasks: %s", exc)
        return None
