"""A run that went silent, recognised before its lease expires.

While a run works, two signs of life reach its namespace: its partitions' commits (one
every ``--snapshot-interval``, folded into the progress record every
``--progress-interval``) and its driver's lease renewals (every third of ``--lease-ttl``).
A run killed outright (SIGKILL, a lost machine) leaves a lease that stays live for up to a
TTL, all the while looking like a run at work. Once *both* signs are overdue, each by more
than :data:`OVERDUE_FACTOR` times the interval the run recorded for it (the progress
record holds the two intervals, the lease its TTL), the run is *stalled*: readers say
``no progress for 45 s`` (the time since the last sign) while the lease still stands.
Either sign on time is enough: commits pause while every partition waits on a slow API,
renewals while the storage hiccups; both stop only when the run is gone or hung.
"""

from __future__ import annotations

from dataclasses import dataclass

from .lease import Lease
from .progress_record import ProgressRecord

#: A sign of life is overdue after this many of its expected intervals without one.
OVERDUE_FACTOR = 2


@dataclass(frozen=True)
class Stall:
    """A live lease whose run has shown no sign of life for ``silent_s`` seconds; the
    lease expires ``expires_in_s`` seconds from the reading (then the run counts as
    interrupted, and another run may take the namespace over)."""

    silent_s: float
    expires_in_s: float

    def describe(self) -> str:
        """``no progress for 45 s``: the one wording of the page and the Storage tab."""
        return f"no progress for {_duration(self.silent_s)}"

    def explain(self) -> str:
        """The longer wording, for a tooltip."""
        return (
            f"{self.describe()}: neither a commit nor a lease renewal for over "
            f"{OVERDUE_FACTOR} times the intervals the run recorded; its lease expires in "
            f"{_duration(self.expires_in_s)}, then the page says interrupted"
        )


def _duration(seconds: float) -> str:
    whole = max(int(seconds), 0)
    return f"{whole} s" if whole < 120 else f"{whole // 60} min {whole % 60} s"


def commit_interval(record: ProgressRecord) -> float | None:
    """Seconds within which a commit of a working run shows in its progress record (a
    snapshot interval, then a progress interval); None in records of earlier versions."""
    if record.snapshot_interval_ms is None or record.progress_interval_ms is None:
        return None
    return (record.snapshot_interval_ms + record.progress_interval_ms) / 1000


def stall_of(record: ProgressRecord | None, lease: Lease | None, now: float) -> Stall | None:
    """The stall of the run holding ``lease`` at ``now`` (Unix time), or None while it shows
    signs of life, when no live lease stands (nothing runs: readers say interrupted) or
    when the lease does not say when it was renewed (written by an earlier version)."""
    if lease is None or not lease.in_force(now):
        return None
    renewal = lease.renewal_interval
    if lease.renewed_at is None or renewal is None or renewal <= 0:
        return None
    if now - lease.renewed_at <= OVERDUE_FACTOR * renewal:
        return None
    last = lease.renewed_at
    if record is not None and record.partitions:
        last_commit = max(p.committed_at_ms for p in record.partitions) / 1000
        # A record without intervals (an earlier version): commits judged like renewals.
        if now - last_commit <= OVERDUE_FACTOR * (commit_interval(record) or renewal):
            return None
        last = max(last, last_commit)
    return Stall(silent_s=now - last, expires_in_s=lease.expires_at - now)
