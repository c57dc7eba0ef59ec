"""The lease file's content, parsed strictly: a crafted lease is expired, never a wall.

Anyone who can write the snapshot root can write ``_lease.json``. An ``expires_at`` of
``Infinity``, ``1e300`` or the string ``"1e12"`` once kept every run out until someone
discarded the namespace (a run waited ``--lease-wait``, then failed), and ``NaN`` blocked
while the page said "not running". Here an expiry must be a finite JSON number no further
ahead than the longest TTL a run may use, and the owner (a run id, shown in log lines and
errors) a short string, shown with anything unprintable escaped.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .lease_holder import Holder, has_exited

#: Owners (run ids) longer than this are not a run's: ``encode_component`` allows 200.
MAX_OWNER_LENGTH = 256
#: The owner's heartbeat renews its lease this many times per TTL.
RENEWALS_PER_TTL = 3


class LeaseFileError(ValueError):
    """The lease file is unreadable or implausible; the message says why (owner escaped)."""


@dataclass(frozen=True)
class Lease:
    """The lease file: its owner, when it expires and was last renewed (Unix time), and
    the process that wrote it (``lease_holder.py``); ``renewed_at`` and ``holder`` are None
    in a lease written before they were recorded."""

    owner: str
    expires_at: float
    renewed_at: float | None = None
    holder: Holder | None = None

    def in_force(self, now: float) -> bool:
        """Whether the lease still holds at ``now`` (Unix time): unexpired, and its holder
        not known to have exited (``lease_holder.py``)."""
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
