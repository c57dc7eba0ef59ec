"""One run at a time per namespace: a lease kept by heartbeat, enforced at every commit.

Two runs of the same job on the same namespace (a zombie Airflow try still running beside
its retry, or a manual resubmit) would otherwise both call the API for everything and both
publish output. Object stores have no locks, so the namespace holds a small lease file
naming its owner (the run id) and an expiry; the owner's driver renews it well before it
expires. A second run waits while the lease is live and takes it over once it has expired
(its owner died), or at once when the process that holds it ran on this machine and has
exited. Ownership is checked where it matters, not only at start:

* every partition commit reads the lease first, so a run that lost it (a stalled zombie
  whose lease expired and was taken over) cannot commit another snapshot;
* the driver checks it again right before publishing the output.

Writing is last-writer-wins (no compare-and-swap on every store), so two runs racing for a
free lease both read it back after a short settle: the one that does not find its own name
waits. Should both still believe they won, the loser fails its next commit check.

A waiting run says whom it waits for, when that run last renewed, when its lease expires and
how long it will wait (``--lease-wait``), then a short line every :data:`WAIT_REPORT_S`
while it waits: a wait of an hour must not look like a hang.

Who holds it (:class:`Holder`): a run on the same machine tells a dead holder from a slow
one without waiting out the TTL. A killed driver (SIGKILL, the OOM killer, a closed
terminal) cannot release its lease, and the next run waited for it to expire (``--lease-
ttl``, 60 s by default): a re-run from a shell, or an Airflow task cleared in the UI and run
on the same worker, sat idle that long. The lease of a classic session now names its
driver's process: host, boot, PID namespace, PID and the process's start time. A run that
shares the first three with the holder sees the same process table; when the holder's PID is
gone, belongs to a process started at another time (a reused PID), or is a zombie, the
holder is dead and its lease is taken over at once. Commits stay fenced by the lease as
before; the Python workers a killed driver leaves behind for a moment call what they call
whether the next run waits or not.

Anything short of that proof waits for the TTL as before: another host, a container with its
own PID namespace, a system without ``/proc``, a process this user may not inspect
(``hidepid``), a stopped one (a driver stopped by ``SIGSTOP`` may wake up: fencing handles
it once its lease has expired, not before). A Spark Connect client names no holder: its
tasks go on on the server after it dies.

The lease file (:func:`parse_lease`) is parsed strictly: a crafted lease is expired, never a
wall. Anyone who can write the snapshot root can write ``_lease.json``. An ``expires_at`` of
``Infinity``, ``1e300`` or the string ``"1e12"`` once kept every run out until someone
discarded the namespace (a run waited ``--lease-wait``, then failed), and ``NaN`` blocked
while the page said "not running". Here an expiry must be a finite JSON number no further
ahead than the longest TTL a run may use, and the owner (a run id, shown in log lines and
errors) a short string, shown with anything unprintable escaped.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar, overload

from fsspec import AbstractFileSystem

from .storage import write_atomically

logger = logging.getLogger(__name__)

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


#: Owners (run ids) longer than this are not a run's: ``encode_component`` allows 200.
MAX_OWNER_LENGTH = 256
#: The owner's heartbeat renews its lease this many times per TTL.
RENEWALS_PER_TTL = 3


class LeaseFileError(ValueError):
    """The lease file is unreadable or implausible; the message says why (owner escaped)."""


@dataclass(frozen=True)
class Lease:
    """The lease file: its owner, when it expires and was last renewed (Unix time), and
    the process that wrote it (:class:`Holder`); ``renewed_at`` and ``holder`` are None
    in a lease written before they were recorded."""

    owner: str
    expires_at: float
    renewed_at: float | None = None
    holder: Holder | None = None

    def in_force(self, now: float) -> bool:
        """Whether the lease still holds at ``now`` (Unix time): unexpired, and its holder
        not known to have exited (:func:`has_exited`)."""
        return self.expires_at > now and not (self.holder and has_exited(self.holder))

    @property
    def renewal_interval(self) -> float | None:
        """Seconds between two renewals by the owner's heartbeat, from the TTL the lease
        was written with (None in a lease without ``renewed_at``)."""
        if self.renewed_at is None:
            return None
        return (self.expires_at - self.renewed_at) / RENEWALS_PER_TTL

    def describe(self, now: float) -> str:
        """``last renewed 2026-11-24T10:55:03Z (4s ago), expires 2026-11-24T10:56:03Z (in
        56s)``, ages by this host's clock (``now``)."""
        renewed = "last renewed at an unknown time"
        if self.renewed_at is not None:
            renewed = f"last renewed {_utc(self.renewed_at)} ({now - self.renewed_at:.0f}s ago)"
        return f"{renewed}, expires {_utc(self.expires_at)} (in {self.expires_at - now:.0f}s)"


def _utc(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def printable(owner: str) -> str:
    """``owner`` for a log line: a newline or another control character is escaped, so a
    crafted owner cannot forge log lines."""
    return owner if owner.isprintable() else owner.encode("unicode_escape").decode("ascii")


def _time(data: dict[str, Any], name: str, now: float, max_ahead_s: float) -> float:
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise LeaseFileError(f"{name} is {type(value).__name__}, not a number")
    if not math.isfinite(value) or not 0 <= value <= now + max_ahead_s:
        raise LeaseFileError(
            f"{name} {value!r} is not a time up to {max_ahead_s:g}s from now (the longest TTL)"
        )
    return float(value)


def parse_lease(data: bytes, now: float, max_ahead_s: float, max_bytes: int) -> Lease:
    """The lease in ``data``, read at time ``now``; raises :class:`LeaseFileError`."""
    if len(data) > max_bytes:
        raise LeaseFileError(f"over {max_bytes} bytes")
    try:
        document = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise LeaseFileError(f"not JSON ({type(error).__name__}: {error})") from None
    if not isinstance(document, dict):
        raise LeaseFileError("not a JSON object")
    owner = document.get("owner")
    if not isinstance(owner, str) or not owner or len(owner) > MAX_OWNER_LENGTH:
        raise LeaseFileError(f"owner must be a string of 1 to {MAX_OWNER_LENGTH} characters")
    expires_at = _time(document, "expires_at", now, max_ahead_s)
    renewed = None
    if document.get("renewed_at") is not None:
        renewed = _time(document, "renewed_at", now, max_ahead_s)
    return Lease(owner, expires_at, renewed, Holder.from_json(document.get("holder")))


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a finite number")


LEASE_FILE = "_lease.json"
DEFAULT_TTL_S = 60.0
#: The longest ``--lease-ttl``, and the furthest expiry a reader believes: a lease that
#: claims to run out later than this from now was not written by a run (which renews it
#: every third of its TTL), so it is treated as expired instead of blocking for ever.
MAX_TTL_S = 3600.0
#: How far another host's clock may run ahead of this one's for its lease to be believed.
CLOCK_SKEW_S = 300.0
#: A lease file is a few dozen bytes: larger ones are refused unread.
MAX_LEASE_BYTES = 4096
_SETTLE_S = 0.5  # between writing a lease and reading it back
T = TypeVar("T")
#: Seconds between two "still waiting" lines while another run holds the namespace.
WAIT_REPORT_S = 10.0


class LeaseError(RuntimeError):
    """The namespace is held by another run, or this run lost it (fenced off)."""


class NamespaceLease:
    """The lease of one namespace, as seen by the run ``owner``."""

    def __init__(
        self,
        fs: AbstractFileSystem,
        directory: str,
        owner: str,
        ttl_s: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.time,
        holder: Holder | None = None,
    ) -> None:
        """``holder``: the process whose exit ends the run, named in the lease so that a
        run on the same machine need not wait for its expiry (:func:`has_exited`): the
        driver of a classic session. None for a Spark Connect client, whose tasks go on
        on the server after it dies: its lease only expires."""
        self._fs = fs
        self._directory = directory
        self._path = f"{directory}/{LEASE_FILE}"
        self.owner = owner
        self.ttl_s = ttl_s
        self._clock = clock
        self._holder = holder

    def read(self) -> Lease | None:
        """The lease, or None when there is none or it is unreadable or implausible
        (:func:`parse_lease`): a crafted lease must not keep every run out."""
        try:
            data = self._fs.cat_file(self._path, start=0, end=MAX_LEASE_BYTES + 1)
        except FileNotFoundError:
            return None
        try:
            return parse_lease(data, self._clock(), MAX_TTL_S + CLOCK_SKEW_S, MAX_LEASE_BYTES)
        except LeaseFileError as error:
            logger.warning("treating the lease %s as expired: %s", self._path, error)
            return None

    def live(self) -> bool:
        """Whether some run holds the lease (it is working on the namespace): unexpired,
        and its holder not known to have exited."""
        lease = self.read()
        return lease is not None and lease.in_force(self._clock())

    def holds(self) -> bool:
        """Whether this run owns the lease now (checked before every commit)."""
        lease = self.read()
        return lease is not None and lease.owner == self.owner

    @overload
    def acquire(self, wait_s: float, poll_s: float = ..., report_s: float = ...) -> None: ...

    @overload
    def acquire(
        self,
        wait_s: float,
        poll_s: float = ...,
        report_s: float = ...,
        *,
        meanwhile: Callable[[], T],
    ) -> T: ...

    def acquire(
        self,
        wait_s: float,
        poll_s: float = 1.0,
        report_s: float = WAIT_REPORT_S,
        *,
        meanwhile: Callable[[], T | None] = lambda: None,
    ) -> T | None:
        """Take the lease, waiting up to ``wait_s`` for a live one to end or expire; while
        waiting, say so every ``report_s`` (each poll reads the lease file, nothing more).

        ``meanwhile`` runs while a lease just written settles (the read-back that tells a
        race's winner), in place of an idle wait: work that touches nothing of the
        namespace, such as reading the input. Its result is returned once the lease is
        this run's; a run that lost the race runs it again after its next write, so what
        it returns was done holding the lease. Should it raise, the lease is let go."""
        started = self._clock()
        reported_at: float | None = None
        while True:
            lease = self.read()
            now = self._clock()
            if lease is None or lease.owner == self.owner or not lease.in_force(now):
                if lease is not None and lease.owner != self.owner:
                    _log_takeover(lease, now)
                done = self._settle(meanwhile)
                if self.holds():
                    return done
                continue  # another run wrote after us: it won
            waited = now - started
            if waited >= wait_s:
                raise LeaseError(
                    f"another run ({printable(lease.owner)}) holds {self._directory} and renews "
                    f"its lease ({lease.describe(now)}); waited {wait_s:g}s for it to finish "
                    "(--lease-wait)"
                )
            if reported_at is None:
                logger.info(
                    "run %s holds this namespace: waiting up to %gs (--lease-wait) for it to "
                    "finish or its lease to expire; %s (%s)",
                    printable(lease.owner),
                    wait_s,
                    lease.describe(now),
                    self._directory,
                )
                reported_at = now
            elif now - reported_at >= report_s:
                logger.info(
                    "still waiting for run %s: %.0fs of %gs (--lease-wait); %s",
                    printable(lease.owner),
                    waited,
                    wait_s,
                    lease.describe(now),
                )
                reported_at = now
            time.sleep(poll_s)

    def _settle(self, meanwhile: Callable[[], T | None]) -> T | None:
        """Write the lease, run ``meanwhile`` and wait what is left of the settle."""
        self._write()
        written = time.monotonic()
        try:
            done = meanwhile()
        except BaseException:
            self.release()
            raise
        time.sleep(max(0.0, _SETTLE_S - (time.monotonic() - written)))
        return done

    def renew(self) -> bool:
        """Extend the lease; False when another run has taken it (this run is fenced)."""
        if not self.holds():
            return False
        self._write()
        return True

    def release(self) -> None:
        if self.holds():
            self._fs.rm_file(self._path)

    def _write(self) -> None:
        now = self._clock()
        lease = {"owner": self.owner, "expires_at": now + self.ttl_s, "renewed_at": now}
        if self._holder is not None:
            lease["holder"] = self._holder.to_json()
        write_atomically(self._fs, self._directory, LEASE_FILE, json.dumps(lease).encode())


def _log_takeover(lease: Lease, now: float) -> None:
    if lease.expires_at <= now:
        logger.warning("taking over the expired lease of run %s", printable(lease.owner))
        return
    assert lease.holder is not None  # not in force, unexpired: its holder has exited
    logger.warning(
        "taking over the lease of run %s: its process (PID %d on this host) has exited, %s",
        printable(lease.owner),
        lease.holder.pid,
        lease.describe(now),
    )


class Heartbeat:
    """Renews a lease from a daemon thread every third of its TTL (:data:`RENEWALS_PER_TTL`)
    until stopped.

    ``on_lost`` runs once, in that thread, if the lease was taken over: the caller stops
    its work there (the commit checks would stop it anyway, a little later).
    """

    def __init__(self, lease: NamespaceLease, on_lost: Callable[[], None]) -> None:
        self._lease = lease
        self._on_lost = on_lost
        self._stop = threading.Event()
        self.lost = False
        self._thread = threading.Thread(target=self._run, name="lease-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._lease.ttl_s / RENEWALS_PER_TTL):
            try:
                renewed = self._lease.renew()
            except OSError as error:  # storage hiccup: try again next beat
                logger.warning("could not renew the lease: %s", error)
                continue
            if not renewed:
                self.lost = True
                logger.error("lease lost: another run took over this namespace")
                self._on_lost()
                return
