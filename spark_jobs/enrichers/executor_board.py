"""What the tasks of one executor found of an API's rate limit, shared between them.

Each partition finds its share of a limit nobody gave (``rate_control.py``) on its own,
and each holds on to it: when a neighbour ends or only waits on its last records (a body
that stalls until the read deadline), the ones still sending keep their old share and
only their probe, seconds later, finds the freed one; when a neighbour starts, they keep
the share they had alone until 429s cut it. On ``local[2]`` with 4 partitions these
changes of wave were the largest loss of the limit.

So the tasks of an executor keep a small board, a file every Python worker of the
executor opens (as ``executor_rate.py`` does for a given rate): each task's accepted
rate and whether its pace held sends back (it *wants* more), written at its ticks, and
the executor's total at the last cut (the cutting task's new share and its neighbours'
accepted rates). A task's fair share is max-min fair: the total less what the tasks that
want no more use, over the tasks that want more. A task counts while it holds its
slot's lock (as ``executor_rate.py``'s slots; a killed worker's lock goes with it), and
wants more only while its entry is fresh: one that sends nothing is not using a share.
A newcomer wants its share from its first send, and the others give it up at their next
tick, with no grace to wait out. No coordinator: each executor's tasks share what they
found, executors still converge on their shares through the 429s. The board lives in the
user's private folder (``private_dir.py``); what in it is not a number, or not where an
entry goes, is left out with a warning naming the file (once per task).
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct

from .executor_rate import MAX_SLOTS, take_slot
from .private_dir import PrivateFolder, executor_folder

logger = logging.getLogger(__name__)

FRESH_S = 2.5
"""An entry older than this is a task sending nothing (draining, starting up): it uses no
share until it writes again. Tasks write every tick they send in (0.25 s); a pause for a
``Retry-After`` of 1 s, which all of them meet together, is not sending nothing."""
TOTAL_MAX_AGE_S = 60.0
"""A total older than this is forgotten (as a predecessor's rate in ``learned_rates``)."""
_TOTAL = struct.Struct("<dd")  # the executor's accepted rate at its last cut, cut at
_ENTRY = struct.Struct("<ddd")  # a slot's accepted rate, written at, wants more (1) or not
MAX_BYTES = _TOTAL.size + MAX_SLOTS * _ENTRY.size
"""The board is never read beyond its slots, however large the file has grown."""
Entries = dict[int, tuple[float, float, float]]
"""Each slot's entry as written: accepted rate, written at, wants more (1.0) or not."""


class ExecutorBoard:
    """One task's place on its executor's board, kept in ``folder`` (closed when it
    leaves)."""

    def __init__(self, folder: PrivateFolder) -> None:
        self._folder = folder
        try:
            self._slot_fd, self._slot = take_slot(folder)
            self._fd = folder.open_file("board")
        except OSError:
            folder.close()
            raise
        self._broken = False  # an I/O error: the task goes on finding its share alone
        self._warned = False  # a malformed board is said once

    def publish(self, accepted: float, now: float, wants_more: bool) -> None:
        """This task's accepted rate (requests/s) as of ``now`` (monotonic seconds), and
        whether its pace held sends back since it last wrote."""
        offset = _TOTAL.size + self._slot * _ENTRY.size
        self._locked_write(offset, _ENTRY.pack(accepted, now, float(wants_more)))

    def record_cut(self, share: float, now: float) -> None:
        """This task cut to ``share``: the executor's total is that, as much again for
        each neighbour that wants more (they meet the same spent windows, and a young
        one has not measured its share yet), and what the others accept."""
        neighbours = self._neighbours(self._read()[1], now)
        others = sum(share if wants else accepted for accepted, wants in neighbours)
        self._locked_write(0, _TOTAL.pack(share + others, now))

    def fair_share(self, now: float) -> float | None:
        """The executor's total less what the neighbours that want no more accept, over
        this task and the neighbours that want more; None before any cut,
        ``TOTAL_MAX_AGE_S`` after the last, or when nothing is left of it."""
        (total, cut_at), entries = self._read()
        if not total > 0 or now - cut_at > TOTAL_MAX_AGE_S or self._slot not in entries:
            return None  # no total, or a board that is not this task's (torn, foreign)
        wanting = 1
        for accepted, wants_more in self._neighbours(entries, now):
            if wants_more:
                wanting += 1
            else:
                total -= accepted
        return total / wanting if total > 0 else None

    def spare(self, now: float) -> float:
        """What the executor's total leaves unused now, by what its other tasks accept:
        a newcomer starts there while the others give way, not above the limit."""
        (total, _), entries = self._read()
        spare = total - sum(accepted for accepted, _ in self._neighbours(entries, now))
        return max(spare, 0.0)

    def leave(self) -> None:
        """This task ends: its slot's lock is given back, and with it its share."""
        for fd in (self._fd, self._slot_fd):
            os.close(fd)
        self._folder.close()

    def _neighbours(self, entries: Entries, now: float) -> list[tuple[float, bool]]:
        """The accepted rate and want of each other task still on the board; one whose
        entry is not fresh sends nothing and wants nothing."""
        found = []
        for slot, (accepted, written_at, wants_more) in entries.items():
            if slot == self._slot or not self._held(slot):
                continue
            fresh = now - written_at <= FRESH_S
            found.append((accepted, bool(wants_more)) if fresh else (0.0, False))
        return found

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

    def _read(self) -> tuple[tuple[float, float], Entries]:
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
        if (len(data) - _TOTAL.size) % _ENTRY.size and len(data):
            self._malformed(f"{len(data)} bytes, not a whole number of entries")
        if len(data) < _TOTAL.size:
            return (0.0, 0.0), {}
        total, cut_at = _TOTAL.unpack_from(data)
        entries = {}
        for slot in range((len(data) - _TOTAL.size) // _ENTRY.size):
            entry = _ENTRY.unpack_from(data, _TOTAL.size + slot * _ENTRY.size)
            if not all(_usable(value) for value in entry):
                self._malformed(f"slot {slot}'s entry is not a rate")
            elif entry[1] > 0:  # all zeros: never written
                entries[slot] = entry
        if _usable(total) and _usable(cut_at):
            return (total, cut_at), entries
        self._malformed("its total is not a rate")
        return (0.0, 0.0), entries

    def _malformed(self, problem: str) -> None:
        if not self._warned:
            self._warned = True
            logger.warning("%s: %s; left out", self._folder.path / "board", problem)

    def _held(self, slot: int) -> bool:
        """Whether a task holds ``slot`` now: its lock cannot be taken (this task's own
        too: a lock belongs to the open file, not the process)."""
        fd = self._folder.open_existing(f"slot-{slot}")
        if fd is None:
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
    try:
        folder = executor_folder("board", scope)
        return None if folder is None else ExecutorBoard(folder)
    except OSError as exc:
        logger.warning("rate limit findings not shared with this executor's tasks: %s", exc)
        return None
