"""One of a provider's token limits, as this partition's share of it, in either shape.

Providers state a token limit per window (a minute) and enforce it in one of two shapes:

* a *bucket* (OpenAI's, Anthropic's, Azure's): refilled continuously at the limit per
  window, up to the limit; ``reset`` is the time until the bucket is *full* again;
* a *fixed window* (many gateways', the demo endpoint's default): everything counted from
  the window's start to its end, the whole limit back at once when it turns; ``reset``
  is the time until it turns.

A :class:`TokenLimit` keeps what this partition may still spend (``level``): its share of
the limit's rate while it is a bucket, its share of the limit at each turn while it is a
window. Calls are charged as they are admitted and refunded as the provider does
(``pacing.py`` knows how each provider charges).

Every answer that states the remaining tokens corrects the level to this partition's
share of that remaining, less what the provider may not have counted yet (the calls of
this partition admitted after the answered one, and those before it still out): the
provider's count is the truth, shared with the other partitions and clients of the key,
and it corrects the estimates' errors both ways. A configured limit caps the share: a
stated remaining never lifts it above the configured limit.

The shape tells itself from the answers: a bucket's ``reset`` is the time its stated
deficit takes to refill, ``(limit - remaining) / limit x window``, always; a window's
``reset`` is the time to its turn, whatever is left, and agrees with that only by
chance (mid-window, at the pace the limit allows). So one of the last answers that
disagrees makes it a window; a bucket until an answer says otherwise (the providers').

A provider that states the remaining but not when it refills (Azure's headers) may be a
window or a bucket: while calls are out their answers say what is left, and nothing is
assumed to refill meanwhile; once none is out, the level refills at the rate, so a call
goes to ask (a refusal's ``retry-after-ms`` then pauses the limit: :meth:`pause`).

Values are hostile input (``rate_headers.py`` drops nonsense); a wait is never longer
than a window plus ``MAX_RESET_S``: a silly reset or usage can slow a partition, never
stall it.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable

from ..rate_headers import ANTHROPIC_ROUNDING, MAX_RESET_S, TokenQuota

BURST_S = 1.0
"""Seconds of the rate a bucket saves up by itself while idle: beyond that, only a
remaining the provider states is spent at once (it may enforce a minute's limit over
shorter periods, as OpenAI's guide says)."""
SHAPE_ANSWERS = 16
"""The recent answers one of which disagreeing with a bucket makes a window: more than a
window's chance agreements in a row (a few answers mid-window)."""
SHAPE_TOLERANCE = 0.05
"""How far (a share of the window, plus ``SHAPE_SLACK_S``) a bucket's reset may stray from
its deficit's refill time: the provider counts at some point of the round trip, rounds
its reset, and Anthropic its remaining (to the thousand: the refill of half of that more)."""
SHAPE_SLACK_S = 0.1


class TokenLimit:
    """This partition's share of one token limit (``share`` of ``per_window`` tokens a
    ``window_s``), configured or stated; see the module docstring."""

    def __init__(
        self,
        per_window: float,
        window_s: float,
        share: float,
        configured: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window_s = window_s
        self._share = share
        self._configured = configured
        self._clock = clock
        self.capacity = self.rate = 0.0
        self.set_limit(per_window)
        self._level = 0.0
        self._at = clock()
        self.turns_at = math.inf  # a window's next turn (known once it is one)
        self._out = 0.0  # charges of the calls not answered yet
        self._paused_until = -math.inf
        self._refill_unstated = False  # a remaining stated without its reset (Azure's)
        self._disagreed: deque[bool] = deque(maxlen=SHAPE_ANSWERS)

    @property
    def level(self) -> float:
        """The tokens this partition may still spend now (below zero: owed)."""
        self._refill()
        return self._level

    @property
    def fixed_window(self) -> bool:
        """Whether the answers say the limit is a fixed window, not a bucket."""
        return any(self._disagreed)

    def set_limit(self, per_window: float) -> None:
        """The provider's (or the spec's) limit per window; a configured one caps it."""
        if self._configured is not None:
            per_window = min(per_window, self._configured)
        self.capacity = per_window * self._share
        self.rate = self.capacity / self.window_s

    def _refill(self) -> float:
        now = self._clock()
        if self.fixed_window:
            if now >= self.turns_at:
                turns = math.floor((now - self.turns_at) / self.window_s) + 1
                self.turns_at += turns * self.window_s
                # the calls still out may be counted in the window that just began
                self._level = self.capacity - self._out
        elif not self._refill_unstated or self._out <= 0:
            saved = min(self.capacity, self.rate * BURST_S)  # what it saves up by itself
            if self._level < saved:
                self._level = min(saved, self._level + (now - self._at) * self.rate)
        self._at = now
        return now

    def wait_for(self, tokens: float) -> float:
        """Seconds until ``tokens`` may be charged (0: now). A call larger than what the
        limit ever holds waits for it to be full and then goes (below zero)."""
        now = self._refill()
        need = min(tokens, self.capacity if self.fixed_window else self.rate * BURST_S)
        if now < self._paused_until:
            return min(self._paused_until - now, self.window_s + MAX_RESET_S)
        if self._level >= need:
            return 0.0
        if self.fixed_window:
            wait = self.turns_at - now
        else:
            wait = (need - self._level) / self.rate
        return min(max(wait, 1e-3), self.window_s + MAX_RESET_S)

    def pause(self, seconds: float) -> None:
        """Charge nothing for ``seconds``: the provider refused a call on this limit and
        said when to come back (Azure's ``retry-after-ms``, OpenAI's "try again in"). A
        limit whose window and refill the headers do not state (Azure's remaining alone)
        learns its turn this way, instead of one refusal per call refilled at the rate."""
        self._paused_until = max(self._paused_until, self._clock() + seconds)

    def charge(self, tokens: float) -> None:
        self._refill()
        self._level -= tokens
        self._out += tokens

    def answered(self, tokens: float) -> None:
        """A call charged ``tokens`` is no longer out (answered, or it failed)."""
        self._out -= tokens
        if self._out < 1e-6:  # sums of floats taken away in another order: none is out
            self._out = 0.0

    def refund(self, tokens: float) -> None:
        """Give back ``tokens`` the provider gave back (negative: it counted more)."""
        self._refill()
        self._level = min(self._level + tokens, max(self.capacity, self._level))

    def observe(self, quota: TokenQuota, sent_at: float, uncounted: float) -> None:
        """An answer's statement of the limit (the limit, the remaining and when it
        resets) to a call sent at ``sent_at``; ``uncounted``: tokens of this partition's
        calls it may not hold yet. A window's count from before its last turn is old."""
        if quota.limit is not None:
            self.set_limit(quota.limit)
        if quota.remaining is None:
            return
        now = self._refill()
        self._refill_unstated = quota.reset_s is None
        if quota.reset_s is not None and quota.limit:
            self._disagreed.append(_disagrees_with_a_bucket(quota, self.window_s))
        if self.fixed_window:
            if math.isfinite(self.turns_at) and sent_at < self.turns_at - self.window_s:
                return
            if quota.reset_s is not None:
                self.turns_at = now + min(quota.reset_s, self.window_s)
        stated = min(quota.remaining, quota.limit or quota.remaining) * self._share
        self._level = min(stated, self.capacity) - uncounted


def _disagrees_with_a_bucket(quota: TokenQuota, window_s: float) -> bool:
    """Whether the reset is not the time the stated deficit takes to refill."""
    assert quota.limit and quota.remaining is not None and quota.reset_s is not None
    refill_s = (quota.limit - quota.remaining) / quota.limit * window_s
    allowed = SHAPE_TOLERANCE * window_s + SHAPE_SLACK_S
    allowed += ANTHROPIC_ROUNDING / 2 / quota.limit * window_s if quota.rounded else 0.0
    return abs(quota.reset_s - refill_s) > allowed
