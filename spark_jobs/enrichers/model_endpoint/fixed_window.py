"""A provider's fixed window, recognised from its answers and spent as fast as calls go.

Providers enforce token limits in one of two shapes, and the best pace differs:

* a *bucket* (OpenAI's and Anthropic's: refilled continuously, enforced over periods
  shorter than the minute stated) refuses a burst, so calls are paced at the rate
  (``pacing.TokenBucket``);
* a *fixed window* (many gateways', the demo endpoint's) counts every call from the
  window's start to its end and refuses nothing within the limit however fast the calls
  come. Paced at the rate, a run fills 0.97-0.98 of each window and its last calls
  spill into one more window; a hand-written loop that sends until refused fills each
  window to the last token, and pays in 429s.

The shapes tell themselves apart by the end each answer dates its window to: sent at
``s``, answered at ``a``, stating a reset ``r``, a call was counted in a window ending
between ``s + r`` and ``a + r``. A fixed window's answers agree on one end, and the next
window's on that end plus the window's length. A bucket's end moves with every call (it
states when the bucket will be full again), out of any such interval within a round
trip. Answers that have agreed for ``EVIDENCE_S`` of sending, and for twice the
narrowest of their intervals (a bucket's agree for no longer), make the window *fixed*;
one that disagrees makes it a bucket again. A call counted in another window (sent just
before the end, or waiting for a connection past it) agrees on that window's end.

The window the answers agreed in stays the bucket's to its end: its share on top of what
the bucket already sent in it drew 429s. Each later window gives this partition its
share of the limit (``allowance``) from the window's start, spendable at once; calls
wait for the next window once it is spent, and none is sent in the last ``guard_s``
before the earliest end (it could be counted in either window). The share is the
partition's whatever the others do, so no partition can spend another's; the provider's
``remaining``, less what this partition has not had counted yet, can only lower it (a
neighbour that spends beyond its share, another client of the same key). Reservations
settle with the answers' ``usage`` as in the bucket.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from functools import partial

from .freed_tokens import FreedTokens

EVIDENCE_S = 2.0
"""Seconds of sending over which answers must agree on their window's end."""
GUARD_SHARE = 0.05
"""The share of the window before its end in which nothing is sent (at most 0.5 s)."""
_SLACK_S = 0.005
"""How far two answers' ends may disagree and still be one: resets come rounded to ms."""


class FixedWindow:
    """The current window of a provider whose answers state a fixed end, and this
    partition's spending in it."""

    def __init__(self, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self.guard_s = min(0.5, GUARD_SHARE * window_s)
        self.allowance = 0.0
        """This partition's tokens per window."""
        self._clock = clock
        self._earliest, self._latest = -math.inf, -math.inf  # the current window's end
        self._agreed_since = math.inf  # the first sending of the answers that agree
        self._narrowest = math.inf  # the narrowest interval among the agreeing answers
        self._fixed_from = math.inf  # the first window spent as a fixed one starts here
        self.spent = 0.0
        self._index = 0  # the current window's number, for settlements
        self._freed = FreedTokens()

    @property
    def fixed(self) -> bool:
        """Whether calls are taken from this window now (else the bucket paces them)."""
        return self.allowance > 0 and self._clock() >= self._fixed_from

    @property
    def ends(self) -> float:
        """The latest the current window ends (a call sent after it is in the next)."""
        return self._latest

    def observe(self, sent_at: float, answered_at: float, reset_s: float, left: float) -> None:
        """An answer dating the window it was counted in to end ``reset_s`` after it was,
        whose count leaves ``left`` tokens in it once this partition's calls not counted
        yet are."""
        earliest, latest = sent_at + reset_s, answered_at + reset_s
        self._roll(self._clock())
        shift = 0  # the answer's window, from the current one (-1: the one before)
        if math.isfinite(self._earliest):
            shift = round((earliest - self._earliest) / self.window_s)
        low = max(earliest, self._earliest + shift * self.window_s)
        high = min(latest, self._latest + shift * self.window_s)
        if low > high + _SLACK_S:  # a moved end: a bucket's, or the first answer
            self._earliest, self._latest = earliest, latest
            self._agreed_since, self._narrowest = sent_at, latest - earliest
            self._fixed_from = math.inf
            return
        if shift:  # counted in another window (sent before the roll, or while waiting)
            return
        self._earliest, self._latest = low, max(low, high)
        self._narrowest = min(self._narrowest, latest - earliest)
        self._agreed_since = min(self._agreed_since, sent_at)
        evidence = sent_at - self._agreed_since >= max(EVIDENCE_S, 2 * self._narrowest)
        if evidence and self._fixed_from == math.inf:
            # The window the evidence came in is the bucket's to its end (the next opens
            # with this partition's whole share), and no call goes in its last guard_s.
            self._fixed_from = self._earliest - self.guard_s
        if self.fixed:  # never beyond what is left, whoever spent the rest
            self.spent = max(self.spent, self.allowance - max(0.0, left))

    def _roll(self, now: float) -> None:
        if now < self._latest or not math.isfinite(self._latest):
            return
        windows = math.floor((now - self._latest) / self.window_s) + 1
        self._earliest += windows * self.window_s
        self._latest += windows * self.window_s
        self._index += windows
        self.spent = 0.0

    def wait_for(self, tokens: float) -> float:
        """Seconds until ``tokens`` may be taken (0: now)."""
        now = self._clock()
        self._roll(now)
        spent = self.spent > 0  # an unspent window takes a call larger than the share
        if now >= self._earliest - self.guard_s or (spent and self.spent + tokens > self.allowance):
            return max(self._latest - now, 1e-3)
        return 0.0

    def take(self, tokens: float) -> int:
        """Take ``tokens`` in the current window; returns the window's number for
        :meth:`give`."""
        self._roll(self._clock())
        self.spent += tokens
        return self._index

    def give(self, tokens: float, window: int) -> None:
        """Settle a call taken in ``window``: ``tokens`` back (negative: taken beyond);
        a window that ended has nothing to settle."""
        self._roll(self._clock())
        if window != self._index:
            return
        self.spent -= tokens
        if tokens > 0:
            self._freed.notify()

    async def acquire(self, tokens: float) -> int:
        """Take ``tokens`` once the window has room (waking when a settlement frees
        some); the window taken from."""
        await self._freed.wait(partial(self.wait_for, tokens))
        return self.take(tokens)
