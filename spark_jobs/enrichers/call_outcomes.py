"""What the calls of the last minute were answered, counted by outcome, for progress lines.

When every call is throttled nothing finishes, and a progress line that says only
``0 of 4 000 records committed`` cannot tell a spent rate limit from a hung job. The
sender counts each answer here under its outcome: the status and, for an error, the
provider's code as :func:`~.account_errors.provider_error` reads it (``200``,
``429 rate_limit_exceeded``, ``503``), or ``transport`` for a call that got no HTTP
answer. A redirect hop is not an outcome (the call's answer is where it led). Each cut
carries :meth:`CallOutcomes.counts` in the manifest's stats (``recent_calls``); the
driver adds the running partitions' up and says what they show
(``snapshots/progress.py``).

Bounded whatever a server answers: :data:`BUCKETS` buckets of :data:`BUCKET_S` seconds
make the window, at most :data:`MAX_OUTCOMES` distinct outcomes are named in it (the
rest count as :data:`OTHER`), and a code is at most 64 identifier characters (the
parser refuses anything else). Counts only: no record data, no message text, nothing a
secret could be in.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from .account_errors import ProviderError

#: The window the issue's wording names ("all 480 calls of the last 60 s ...").
WINDOW_S = 60.0
#: Buckets of the window: it slides in steps of a tenth of a minute.
BUCKETS = 6
BUCKET_S = WINDOW_S / BUCKETS
#: Distinct outcomes named at once: a progress line names a few, a hostile server
#: answering a new code each time must not grow the counter or the manifest.
MAX_OUTCOMES = 8
#: The name that counts every outcome beyond :data:`MAX_OUTCOMES`.
OTHER = "other"
#: A call that got no HTTP answer (reset, refused, timed out, broken reply).
TRANSPORT = "transport"


def outcome_name(status: int, error: ProviderError | None = None) -> str:
    """``429 rate_limit_exceeded``, ``503``, ``200``: the status and the provider's code."""
    code = error.code if error is not None else None
    return f"{status} {code}" if code else str(status)


class CallOutcomes:
    """Answers of the last :data:`WINDOW_S` seconds by outcome: a ring of buckets and
    their running total, so adding one and reading the window both cost a few steps."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: list[Counter[str]] = [Counter() for _ in range(BUCKETS)]
        self._window: Counter[str] = Counter()  # the sum of the buckets
        self._slot = int(clock() // BUCKET_S)

    def add(self, outcome: str) -> None:
        """Count one answer; a new outcome beyond :data:`MAX_OUTCOMES` counts as OTHER."""
        self._advance()
        window = self._window
        if outcome not in window and len(window) >= MAX_OUTCOMES:
            outcome = OTHER
        window[outcome] += 1
        self._buckets[self._slot % BUCKETS][outcome] += 1

    def counts(self) -> dict[str, int]:
        """The outcomes of the last :data:`WINDOW_S` seconds (the current bucket is
        partly over: the window is 50 to 60 s long)."""
        self._advance()
        return dict(self._window)

    def _advance(self) -> None:
        """Empty the buckets whose time has passed (all of them after a long silence)."""
        slot = int(self._clock() // BUCKET_S)
        for passed in range(self._slot + 1, min(slot, self._slot + BUCKETS) + 1):
            bucket = self._buckets[passed % BUCKETS]
            self._window -= bucket  # drops the outcomes that reach zero
            bucket.clear()
        self._slot = max(slot, self._slot)
