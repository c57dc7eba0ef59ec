"""What the partitions calling one API share of its rate: a given rate's schedule, and
what they found of a limit nobody gave. The one coordinator of ``rate_control.py``.

Each partition runs its own controller, and sharing changes only how quickly it gets to
its share (``rate_control.py`` converges without any):

* a **given** ``--requests-per-second R`` is ``R/S`` for each of the job's ``S`` task
  slots, but a task that sends at most ``R/S`` leaves its share unused whenever a
  neighbour is starting, ending or between tasks (with short tasks on ``local[2]``, half
  of ``R`` for seconds at a time). So the neighbours pace together on one GCRA schedule at
  ``R/S`` times the most of them seen at once: each holds the lowest free slot, so holding
  slot ``N`` proves ``N + 1`` at once, a count that never exceeds the real slots, and the
  executors never send more than ``R`` together;
* a limit **found** (429s) is held on to by each partition: when a neighbour ends the
  others keep their old share until a probe, seconds later, finds the freed one; when one
  starts, they keep theirs until 429s cut it. So the neighbours keep what each accepts,
  whether its pace held sends back (it *wants* more), and the total at the last cut, and
  each takes its max-min fair share: the total less what those that want no more use, over
  those that want more. A neighbour counts while it holds its slot, and wants more only
  while its entry is fresh (``FRESH_S``). A newcomer joins at its first send, not while
  Spark reads its input, and starts within what the others leave unused;
* the **successor**: Spark reuses a Python worker for an executor core's tasks one after
  another, and a partition that starts where another just found its share starts there;
  slow start's overshoot would meet a spent window and pause every neighbour for the
  server's ``Retry-After``. One that met no limit hands on the rate it was accepted at, a
  floor its successor's slow start goes on from (else every partition of a fast API would
  spend its first seconds at a fraction of it).

Two implementations, one state (:class:`Commons`): the partitions of this process, in
memory (the default, and all a Spark Python worker has alone), and the tasks of one
executor (separate Python processes, children of one ``pyspark.daemon``), in one file per
API key in the user's private folder (``private_dir.py``), where a killed worker's slot
lock goes with it. Where that folder cannot be used the task shares in process; where the
file fails later the task goes on alone (``R/S`` at most). What in the file is not what
this module writes is read as nothing found, with one warning naming it, and replaced.
"""

from __future__ import annotations

import fcntl
import logging
import math
import os
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from .private_dir import PrivateFolder, executor_folder

if TYPE_CHECKING:
    from .config import HttpEnricherConfig

logger = logging.getLogger(__name__)

FRESH_S = 2.5
"""An entry older than this is a partition sending nothing (draining, starting up): it
uses no share. Ten ticks of ``rate_control.TICK_S``, at which a sending one writes; a
pause for a ``Retry-After`` of 1 s, which all of them meet together, is not nothing."""
MAX_AGE_S = 60.0
"""A total or a share handed on is forgotten this long after: a minute, the longest
window of the usual limits; by then its window has refilled and its neighbours are gone."""
MAX_SLOTS = 1024
"""Slots tried at most, far above any executor's cores: more tasks share no further."""
_HEAD = struct.Struct("<7d")  # next free send, seen, total, cut at, found, limited, found at
_ENTRY = struct.Struct("<3d")  # a slot's accepted rate, written at, wants more (1) or not


@dataclass(frozen=True)
class Found:
    """Requests/s found of an API's limit. ``limited``: a share of a limit met, else a
    rate reached in slow start with no limit met (a floor, not a share). ``spare``: what
    the neighbours leave unused now (a newcomer starts within it)."""

    rate: float
    limited: bool
    spare: float = math.inf


@dataclass
class Commons:
    """What the partitions calling one API hold in common."""

    next_free: float = 0.0  # the given rate's next free send time (monotonic seconds)
    seen: int = 0  # the most partitions seen at once
    total: float = 0.0  # the requests/s they all accepted at the last cut...
    cut_at: float = 0.0  # ...made then
    found: Found | None = None  # what the last one to leave found, for its successor...
    found_at: float = 0.0  # ...as it left
    entries: dict[int, tuple[float, float, bool]] = field(default_factory=dict)
    """Each slot's accepted rate, when it wrote it, and whether it wants more."""
    holders: set[int] = field(default_factory=set)  # in process: the slots held


class Neighbours(Protocol):
    """What a partition's rate controller asks of the partitions it shares an API with."""

    def join(self, now: float) -> Found | None:
        """Here from now on (its first send): what to start at, if anything was found."""

    def publish(self, accepted: float, now: float, wants_more: bool) -> None:
        """The rate it was accepted at (requests/s), and whether its pace held sends back."""

    def record_cut(self, share: float, now: float) -> None:
        """It cut to ``share``: the neighbours' total is that and theirs."""

    def fair_share(self, now: float) -> float | None:
        """Its max-min fair share of the last cut's total; None without one."""

    def reserve(self, not_before: float) -> float:
        """The next send time of the given rate at or after ``not_before``, taken."""

    def try_reserve(self, now: float) -> bool:
        """Take the given rate's next send time only if it is free at ``now``."""

    def leave(self, found: Found | None, now: float) -> None:
        """It ends: its slot is given back, and what it found left to its successor."""


_in_process: dict[str, Commons] = {}  # API key -> what this process's partitions share
_in_process_lock = threading.Lock()


class ProcessNeighbours:
    """The partitions of this process calling ``key``: in a Spark Python worker its tasks
    one after another, in a tool several at once. ``per_slot``: a given rate's share of
    one of the job's ``slots``."""

    def __init__(self, key: str, per_slot: float | None = None, slots: int = 1) -> None:
        if (per_slot is not None and not per_slot > 0) or slots < 1:
            raise ValueError(f"need a rate > 0 and slots >= 1, got {per_slot!r}, {slots!r}")
        self._key, self._per_slot, self._slots = key, per_slot, slots
        self._slot = self._take_slot()
        with self._locked() as commons:
            commons.seen = max(commons.seen, self._slot + 1)

    def join(self, now: float) -> Found | None:
        with self._locked() as commons:
            commons.entries[self._slot] = (0.0, now, True)
            fair = self._fair(commons, now)
            if fair is not None:
                used = sum(accepted for accepted, _ in self._others(commons, now))
                return Found(fair, limited=True, spare=max(commons.total - used, 0.0))
            if commons.found is not None and now - commons.found_at <= MAX_AGE_S:
                return commons.found
        return None

    def publish(self, accepted: float, now: float, wants_more: bool) -> None:
        with self._locked() as commons:
            commons.entries[self._slot] = (accepted, now, wants_more)

    def record_cut(self, share: float, now: float) -> None:
        """A neighbour that wants more is taken to cut alike: it meets the same spent
        windows, and a young one has not measured its share yet."""
        with self._locked() as commons:
            others = self._others(commons, now)
            commons.total = share + sum(share if wants else used for used, wants in others)
            commons.cut_at = now

    def fair_share(self, now: float) -> float | None:
        with self._locked() as commons:
            return self._fair(commons, now)

    def reserve(self, not_before: float) -> float:
        if self._per_slot is None or self._slots < 2:
            return not_before  # one slot: nothing to share
        with self._locked() as commons:
            start = max(not_before, commons.next_free)
            commons.next_free = start + 1.0 / self._rate(commons.seen)
        return start

    def try_reserve(self, now: float) -> bool:
        if self._per_slot is None or self._slots < 2:
            return True
        with self._locked() as commons:
            if commons.next_free > now:
                return False
            commons.next_free = now + 1.0 / self._rate(commons.seen)
        return True

    def leave(self, found: Found | None, now: float) -> None:
        with self._locked() as commons:
            if found is not None and found.rate > 0:
                commons.found, commons.found_at = Found(found.rate, found.limited), now
            commons.holders.discard(self._slot)
        self._close()

    def _rate(self, seen: int) -> float:
        """The neighbours' share of the given rate: a slot's for each seen at once."""
        assert self._per_slot is not None
        return self._per_slot * min(max(seen, 1), self._slots)

    def _fair(self, commons: Commons, now: float) -> float | None:
        if not commons.total > 0 or now - commons.cut_at > MAX_AGE_S:
            return None
        if self._slot not in commons.entries:
            return None  # commons that are not this partition's (torn, foreign)
        total, wanting = commons.total, 1
        for accepted, wants_more in self._others(commons, now):
            if wants_more:
                wanting += 1
            else:
                total -= accepted
        return total / wanting if total > 0 else None

    def _others(self, commons: Commons, now: float) -> list[tuple[float, bool]]:
        """What each other partition holding its slot accepts and whether it wants more;
        one whose entry is not fresh sends nothing and wants nothing."""
        found = []
        for slot, (accepted, written_at, wants_more) in commons.entries.items():
            if slot != self._slot and self._held(commons, slot):
                fresh = now - written_at <= FRESH_S
                found.append((accepted, wants_more) if fresh else (0.0, False))
        return found

    @contextmanager
    def _locked(self) -> Iterator[Commons]:
        with _in_process_lock:
            yield _in_process.setdefault(self._key, Commons())

    def _take_slot(self) -> int:
        with self._locked() as commons:
            slot = next(n for n in range(len(commons.holders) + 1) if n not in commons.holders)
            commons.holders.add(slot)
        return slot

    def _held(self, commons: Commons, slot: int) -> bool:
        return slot in commons.holders

    def _close(self) -> None:
        """Nothing to close in process memory."""


class ExecutorNeighbours(ProcessNeighbours):
    """The tasks of this executor calling ``key``, through ``folder`` (closed when this
    one leaves): the same commons, in the folder's file ``commons``."""

    def __init__(self, folder: PrivateFolder, key: str, per_slot: float | None, slots: int):
        self._folder = folder
        self._fd: int | None = None
        self._slot_fd: int | None = None
        self._size = 0  # the file's, as last read: a shorter write truncates it
        self._alone = Commons()  # where the task goes on when the file fails
        self._warned = False  # a malformed file is said once
        try:
            self._fd = folder.open_file("commons")
            super().__init__(key, per_slot, slots)
        except (OSError, ValueError):
            self._close()
            raise

    @contextmanager
    def _locked(self) -> Iterator[Commons]:
        commons = self._read()
        if commons is None:
            yield self._alone
            return
        try:
            yield commons
            self._write(commons)
        finally:
            if self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _read(self) -> Commons | None:
        """The file's commons, locked; None once it failed (the task is alone)."""
        if self._fd is None:
            return None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            data = os.pread(self._fd, _HEAD.size + MAX_SLOTS * _ENTRY.size, 0)
        except OSError as exc:
            self._give_up(exc)
            return None
        self._size = len(data)
        return _parse(data, self._malformed)

    def _write(self, commons: Commons) -> None:
        assert self._fd is not None
        found = commons.found or Found(0.0, limited=False)
        head = (commons.next_free, commons.seen, commons.total, commons.cut_at)
        data = bytearray(_HEAD.pack(*head, found.rate, found.limited, commons.found_at))
        for slot in range(max(commons.entries, default=-1) + 1):
            data += _ENTRY.pack(*commons.entries.get(slot, (0.0, 0.0, False)))
        try:
            os.pwrite(self._fd, data, 0)
            if len(data) < self._size:
                os.ftruncate(self._fd, len(data))
        except OSError as exc:
            self._give_up(exc)

    def _take_slot(self) -> int:
        """Lock the lowest free ``slot-N`` file; its lock is this task's slot."""
        for slot in range(MAX_SLOTS):
            fd = self._folder.open_file(f"slot-{slot}")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self._slot_fd = fd
            return slot
        raise OSError(f"all {MAX_SLOTS} slot files of {self._folder.path} are held")

    def _held(self, commons: Commons, slot: int) -> bool:
        """Whether a task holds ``slot``: its lock cannot be taken (this task's own
        neither: a lock belongs to the open file, not the process)."""
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

    def _close(self) -> None:
        for fd in (self._slot_fd, self._fd):
            if fd is not None:
                os.close(fd)
        self._fd = self._slot_fd = None
        self._folder.close()

    def _give_up(self, exc: OSError) -> None:
        logger.warning("request rate no longer shared with this executor's tasks: %s", exc)
        if self._fd is not None:
            os.close(self._fd)
        self._fd = None

    def _malformed(self, problem: str) -> None:
        if not self._warned:
            self._warned = True
            logger.warning("%s: %s; read as nothing found", self._folder.path / "commons", problem)


def _parse(data: bytes, malformed: Callable[[str], None]) -> Commons:
    """The commons as written; a header that is not (sizes, numbers) counts as none, an
    entry that is not is left out: the file is the user's own, but a torn or foreign one
    must not stop a task nor raise a share."""
    commons = Commons()
    if len(data) < _HEAD.size or (len(data) - _HEAD.size) % _ENTRY.size:
        if data:
            malformed(f"{len(data)} bytes, not a header and whole entries")
        if len(data) < _HEAD.size:
            return commons
    next_free, seen, total, cut_at, found, limited, found_at = head = _HEAD.unpack_from(data)
    if all(map(_usable, head)) and seen.is_integer() and seen <= MAX_SLOTS and limited in (0, 1):
        commons = Commons(next_free, int(seen), total, cut_at, None, found_at)
        commons.found = Found(found, limited=limited == 1) if found > 0 else None
    else:
        malformed("its header is not what this module writes")
    for slot in range((len(data) - _HEAD.size) // _ENTRY.size):
        entry = _ENTRY.unpack_from(data, _HEAD.size + slot * _ENTRY.size)
        if not all(map(_usable, entry)):
            malformed(f"slot {slot}'s entry is not a rate")
        elif entry[1] > 0:  # all zeros: never written
            commons.entries[slot] = (entry[0], entry[1], entry[2] == 1)
    return commons


def _usable(value: float) -> bool:
    return 0 <= value < math.inf  # not NaN, not negative, finite


def key_for(config: HttpEnricherConfig) -> str:
    """What an API's rate limit is likely counted against: the URL template up to its
    path, and where the credential comes from (names, never a value)."""
    url = config.batch.url_template if config.batch is not None else config.url_template
    origin = "/".join((url or "").split("/", 3)[:3])
    credential = [config.token_env, config.token_file, *sorted(config.secret_headers.items())]
    return f"{origin} {credential!r}"


def open_neighbours(config: HttpEnricherConfig) -> Neighbours:
    """This partition's neighbours: the executor's tasks in a Spark Python worker (Spark
    gives those ``SPARK_LOCAL_DIRS``), else, and where the folder cannot be used, this
    process's partitions."""
    key, per_slot, slots = key_for(config), config.rate_per_partition, config.partitions
    if "SPARK_LOCAL_DIRS" in os.environ:
        try:
            folder = executor_folder("rates", key)
            if folder is not None:
                return ExecutorNeighbours(folder, key, per_slot, slots)
        except OSError as exc:
            logger.warning("request rate not shared with this executor's tasks: %s", exc)
    return ProcessNeighbours(key, per_slot, slots)
