"""The process that holds a lease, so a run on the same machine can tell a dead holder
from a slow one without waiting out the TTL.

A killed driver (SIGKILL, the OOM killer, a closed terminal) cannot release its lease, and
the next run waited for it to expire (``--lease-ttl``, 60 s by default): a re-run from a
shell, or an Airflow task cleared in the UI and run on the same worker, sat idle that
long. The lease of a classic session now names its driver's process: host, boot, PID
namespace, PID and the process's start time. A run that shares the first three with the
holder sees the same process table; when the holder's PID is gone, belongs to a process
started at another time (a reused PID), or is a zombie, the holder is dead and its lease
is taken over at once. Commits stay fenced by the lease as before; the Python workers a
killed driver leaves behind for a moment call what they call whether the next run waits
or not.

Anything short of that proof waits for the TTL as before: another host, a container with
its own PID namespace, a system without ``/proc``, a process this user may not inspect
(``hidepid``), a stopped one (a driver stopped by ``SIGSTOP`` may wake up: fencing
handles it once its lease has expired, not before). A Spark Connect client names no
holder: its tasks go on on the server after it dies.
"""

from __future__ import annotations

import functools
import os
import socket
from dataclasses import asdict, dataclass
from typing import Any

#: Longest text accepted for a holder's host, boot id and PID namespace.
MAX_FIELD_LENGTH = 255


@dataclass(frozen=True)
class Holder:
    """A process, as the lease file names it (``started``: clock ticks after boot, field
    22 of ``/proc/PID/stat``; with ``pid`` it tells a reused PID)."""

    host: str
    boot: str
    pid_namespace: str
    pid: int
    started: int

    @property
    def process_table(self) -> tuple[str, str, str]:
        """Host, boot and PID namespace: processes alike in these see the same PIDs."""
        return self.host, self.boot, self.pid_namespace

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object) -> Holder | None:
        """The holder in a lease file, or None when it is absent or implausible: the lease
        then only expires, as a lease written before holders were recorded does."""
        if not isinstance(data, dict):
            return None
        texts = [data.get(name) for name in ("host", "boot", "pid_namespace")]
        numbers = [data.get(name) for name in ("pid", "started")]
        if not all(isinstance(t, str) and 0 < len(t) <= MAX_FIELD_LENGTH for t in texts):
            return None
        if not all(type(n) is int and 0 <= n < 2**63 for n in numbers) or numbers[0] == 0:
            return None  # PID 0 is no process (kill(0) signals one's own group)
        return cls(*texts, *numbers)  # type: ignore[arg-type]


def this_process() -> Holder | None:
    """This process, or None where ``/proc`` does not tell it (not Linux)."""
    return _process(os.getpid())  # by PID: a forked child is not its parent


@functools.cache
def _process(pid: int) -> Holder | None:
    """Process ``pid`` (this one), read once."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            boot = handle.read().strip()
        namespace = os.readlink("/proc/self/ns/pid")
        stat = _stat(pid)
    except OSError:
        return None
    if stat is None:
        return None
    return Holder(socket.gethostname(), boot, namespace, pid, stat[1])


def has_exited(holder: Holder) -> bool:
    """Whether ``holder`` is provably dead: it ran on this host, since this boot, in this
    PID namespace, and its PID is free, reused or a zombie's."""
    here = this_process()
    if here is None or holder.process_table != here.process_table:
        return False
    if holder.pid == here.pid:
        return holder.started != here.started
    try:
        os.kill(holder.pid, 0)  # tells a free PID even where /proc hides other users'
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # a process exists under that PID; /proc tells whose
    except OSError:
        return False
    stat = _stat(holder.pid)
    if stat is None:  # not ours to inspect: alive as far as we can tell
        return False
    state, started = stat
    return started != holder.started or state == "Z"


def _stat(pid: int) -> tuple[str, int] | None:
    """The state and start time of process ``pid`` from ``/proc``, None if unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            line = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after
    # its last ")"; the start time is field 22, the 20th after the name.
    fields = line[line.rfind(")") + 2 :].split()
    if len(fields) < 20 or not fields[19].isdigit():
        return None
    return fields[0], int(fields[19])
