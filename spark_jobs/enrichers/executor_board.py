"""What the tasks of one executor found of an API's rate limit, shared between them.

Each partition finds its share of a limit nobody gave (``rate_control.py``) on its own,
and each holds on to it: when a neighbour ends and no task takes its place (the last
tasks of a stage, an executor with fewer tasks left than cores), the ones still sending
keep their old share and only their probe, seconds later, finds the freed one; a cut
taken while a neighbour was starting sets a share too low for as long. On ``local[2]``
with 4 partitions that lone tail was the largest loss of the limit.

So the tasks of an executor keep a small board, a file every Python worker of the
executor opens (as ``executor_rate.py`` does for a given rate): each task's accepted
rate, written at its ticks, and the executor's total at the last cut (the cutting task's
new share and its neighbours' accepted rates). A task's fair share is that total over
the tasks on the board: those holding their slot's lock (as ``executor_rate.py``'s
slots; a killed worker's lock goes with it), and one that left less than ``GRACE_S``
ago, the time a successor in its worker needs to start. No coordinator: each executor's
tasks share what they found, executors still converge on their shares through the 429s.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
from pathlib import Path

from .executor_rate import MAX_SLOTS, executor_directory, take_slot

logger = logging.getLogger(__name__)

GRACE_S = 3.0
"""A task that left counts this long: a successor in its worker starts within it (on a
busy machine a Python worker, the input and the snapshots take seconds)."""
TOTAL_MAX_AGE_S = 60.0
"""A total older than this is forgotten (as a predecessor's rate in ``learned_rates``)."""
_TOTAL = struct.Struct("<dd")  # the executor's accepted rate at its last cut, cut at
_ENTRY = struct.Struct("<ddd")  # a slot's accepted rate, written at, left at (0: there)
MAX_BYTES = _TOTAL.size + MAX_SLOTS * _ENTRY.size
"""The board is never read beyond its slots, however large the file has grown."""


class ExecutorBoard:
    """One task's place on its executor's board, kept in ``directory``."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._directory = directory
        self._slot_fd, self._slot = take_slot(directory)
        self._fd = os.open(directory / "board", os.O_RDWR | os.O_CREAT, 0o600)
        self._accepted = 0.0
        self._broken = False  # an I/O error: the task goes on finding its share alone

    def publish(self, accepted: float, now: float) -> None:
        """This task's accepted rate (requests/s) as of ``now`` (monotonic seconds)."""
        self._accepted = accepted
        self._write_entry(accepted, now, 0.0)

    def record_cut(self, share: float, now: float) -> None:
        """This task cut to ``share``: the executor's total is that and what its
        neighbours accept now (they meet the same spent windows)."""
        entries = self._read()[1]
        others = sum(
            accepted
            for slot, (accepted, _, left_at) in entries.items()
            if slot != self._slot and not left_at and self._held(slot)
        )
        self._locked_write(0, _TOTAL.pack(share + others, now))

    def fair_share(self, now: float) -> float | None:
        """The executor's total over the tasks on its board; None before any cut or
        ``TOTAL_MAX_AGE_S`` after the last."""
        (total, cut_at), entries = self._read()
        present = sum(
            1
            for slot, (_, _, left_at) in entries.items()
            if (now - left_at < GRACE_S if left_at else self._held(slot))
        )
        if not total > 0 or now - cut_at > TOTAL_MAX_AGE_S or present == 0:
            return None
        return total / present

    def leave(self, now: float) -> None:
        """This task ends: its share is the others' after ``GRACE_S`` unless a successor
        takes the slot; the slot's lock is given back."""
        try:
            self._write_entry(self._accepted, now, now)
        finally:
            for fd in (self._fd, self._slot_fd):
                os.close(fd)

    def _write_entry(self, accepted: float, now: float, left_at: float) -> None:
        offset = _TOTAL.size + self._slot * _ENTRY.size
        self._locked_write(offset, _ENTRY.pack(accepted, now, left_at))

    def _locked_write(self, offset: int, data: bytes) -> None:
        if self._broken:
            return
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                os.pwrite(self._fd, data, offset)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        except OSError as exc:
            self._give_up(exc)

    def _read(self) -> tuple[tuple[float, float], dict[int, tuple[float, float, float]]]:
        """The total and every written slot's entry; what is not a number is left out
        (the file is the executor's own, but a torn or foreign one must not stop a task)."""
        if self._broken:
            return (0.0, 0.0), {}
        try:
            fcntl.flock(self._fd, fcntl.LOCK_SH)
            try:
                data = os.pread(self._fd, min(os.fstat(self._fd).st_size, MAX_BYTES), 0)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        except OSError as exc:
            self._give_up(exc)
            return (0.0, 0.0), {}
        if len(data) < _TOTAL.size:
            return (0.0, 0.0), {}
        total, cut_at = _TOTAL.unpack_from(data)
        entries = {}
        for slot in range((len(data) - _TOTAL.size) // _ENTRY.size):
            entry = _ENTRY.unpack_from(data, _TOTAL.size + slot * _ENTRY.size)
            if entry[1] > 0 and all(_usable(value) for value in entry):
                entries[slot] = entry
        usable = _usable(total) and _usable(cut_at)
        return ((total, cut_at) if usable else (0.0, 0.0)), entries

    def _held(self, slot: int) -> bool:
        """Whether a task holds ``slot`` now: its lock cannot be taken (this task's own
        too: a lock belongs to the open file, not the process)."""
        try:
            fd = os.open(self._directory / f"slot-{slot}", os.O_RDONLY)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return False
        finally:
            os.close(fd)  # closing it gives back a lock just taken
        return False

    def _give_up(self, exc: OSError) -> None:
        logger.warning("rate limit findings no longer shared with this executor: %s", exc)
        self._broken = True


def _usable(value: float) -> bool:
    return value == value and 0 <= value < float("inf")  # not NaN, not negative


def open_board(scope: str) -> ExecutorBoard | None:
    """The board of this executor's tasks calling ``scope`` (what a limit is counted
    against); None where the files cannot be used (each task then finds its share alone)."""
    directory = executor_directory("board", scope)
    if directory is None:
        return None
    try:
        return ExecutorBoard(directory)
    except OSError as exc:
        logger.warning("rate limit findings not shared with this executor's tasks: %s", exc)
        return None
