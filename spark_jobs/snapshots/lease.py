"""One run at a time per namespace: a lease kept by heartbeat, enforced at every commit.

Two runs of the same job on the same namespace (a zombie Airflow try still running beside
its retry, or a manual resubmit) would otherwise both call the API for everything and
both publish output. Object stores have no locks, so the namespace holds a small lease
file naming its owner (the run id) and an expiry; the owner's driver renews it well
before it expires. A second run waits while the lease is live and takes it over once it
has expired (its owner died), or at once when the process that holds it ran on this
machine and has exited (``lease_holder.py``). Ownership is checked where it matters, not
only at start:

* every partition commit reads the lease first, so a run that lost it (a stalled zombie
  whose lease expired and was taken over) cannot commit another snapshot;
* the driver checks it again right before publishing the output.

Writing is last-writer-wins (no compare-and-swap on every store), so two runs racing for
a free lease both read it back after a short settle: the one that does not find its own
name waits. Should both still believe they won, the loser fails its next commit check.

A waiting run says whom it waits for, when that run last renewed, when its lease expires
and how long it will wait (``--lease-wait``), then a short line every
:data:`WAIT_REPORT_S` while it waits: a wait of an hour must not look like a hang.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar, overload

from fsspec import AbstractFileSystem

from .lease_file import RENEWALS_PER_TTL, Lease, LeaseFileError, parse_lease, printable
from .lease_holder import Holder
from .storage import write_atomically

logger = logging.getLogger(__name__)

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
        run on the same machine need not wait for its expiry (``lease_holder.py``): the
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
        (``lease_file.py``): a crafted lease must not keep every run out."""
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
