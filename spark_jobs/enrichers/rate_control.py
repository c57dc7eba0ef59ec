"""A request rate that converges on what the API accepts: AIMD on requests per second.

Halving concurrency does not find a *rate*: with fast answers a handful of slots still
sends far more than a hard limit of R requests/s allows, and the 429 share stays high.
:class:`RateController` paces sends like ``TokenBucket`` (GCRA, one token of burst) and
moves the rate itself:

* **slow start**: without a ``--requests-per-second`` it starts at ``START_RATE`` and
  doubles every tenth of a second until the first throttled answer, like TCP (or at the share
  a predecessor found: ``rate_sharing.py``); until a limit is met or stated a tick's worth
  of the rate may go at once and slots of a rate outgrown are taken anew (``_ramping``);
* **multiplicative decrease**: a *rate limit* cuts the rate to ``BETA`` x the rate the
  server *accepted* over the last second (its answers that were not throttled: with a
  hard limit, about this partition's share of it; the rate sent overshoots by the calls
  still in flight), and pauses *every* new send for the server's ``Retry-After``: the
  answer is about the client, not that one record. A rate limit is a 429 whose headers
  say the quota is spent or state a ``RateLimit-Policy``, or a *sustained* share of
  429s: at least ``throttle_share`` of the last ``throttle_window`` answers. An isolated
  429 (an upstream's noise, one hot key) only delays its own record: cutting and pausing
  on each one ratchets a busy partition down to a trickle (2 % of random 429s took 2 000
  records from seconds to minutes), while a rate above a limit soon has a large share
  refused (slow start's overshoot, a fixed window's tail). A 429 of a call sent before
  the last cut is old news and counts for nothing, and cuts come at most every
  ``CUT_INTERVAL_S`` (one exhausted window answers many calls);
* **additive increase**, concave around the rate the server accepted at the last cut
  (``ceiling_hint``, CUBIC's ``w_max``): back to ``APPROACH`` of it within a few
  seconds, then a slow probe above it, so that the 1 s pause a 429 costs comes seldom;
  a probe ``STALE_HINT`` above it with no 429 means the share grew (a neighbour
  finished): slow start again.

Each partition runs its own controller: partitions sharing a limit all see its 429s in
the same window and cut together, so they settle on about equal shares without talking
to each other. Its neighbours (``rate_sharing.py``) also share what they found: the
total at the last cut, split max-min fair, so a task left alone takes the share of one
that ended at once instead of a probe's seconds, and one that joins (at its first send)
takes its share before any 429. A given ``--requests-per-second`` stays a hard ceiling
(its schedule shared by the neighbours), a ``RateLimit-Policy`` another. The rate grows
only while it is used (at most twice the rate sent), so an idle spell does not end in a
burst.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable

from spark_jobs import defaults

from .rate_headers import MAX_RESET_S, QuotaHint
from .rate_sharing import Found, Neighbours

START_RATE = 50.0
"""Requests/s a partition starts at when no rate is given; slow start doubles it quickly."""
SLOW_START_GROWTH = 1024.0
"""Slow start multiplies the rate by this per second (doubles it every tenth of a second):
a 2 ms API that states no limit is sent to at 3 000 requests/s a partition within half a
second (doubling every half second took 3 s and cost 8 % of a 200 000-record run), and a
limit's first 429s still come before the rate is far above it (the cut follows within a
round trip: ``THROTTLED_RUN``)."""
MIN_RATE = 0.5
"""The rate never drops below this: one call every 2 s still learns when the limit lifts."""
BETA = 0.85
"""The cut on a throttled answer: the rate becomes this share of the rate sent."""
APPROACH = 0.95
"""After a cut the rate climbs quickly back to this share of the throttled rate..."""
PROBE = 0.001
"""...then by this share of it per second, so the next 429 comes some 10 s later..."""
PROBE_MIN = 0.1
"""...but at least by this many requests/s per second, so a small rate still grows."""
CUT_INTERVAL_S = 0.5
"""At most one cut per this long: the 429s of one spent window are one signal."""
PROBE_DOUBLING_S = 4.0
"""The probe's step doubles for every this many seconds without a 429: a share found too
low (a cut on thin evidence, or a neighbour partition finished) is soon regained."""
THROTTLED_RUN = 4
"""So many 429s in a row (no answer accepted between) are sustained throttling too: a
limit's spent window refuses every call at its end, random 429s of 2 % of calls come
four in a row with a chance of 1.6e-7 per call. It saves each partition sharing a limit
most of the ``throttle_share`` of 429s a cut would otherwise cost."""
STALE_HINT = 1.05
"""Probing this far above the rate accepted at the last cut without a 429 means the share
grew (a neighbour partition finished, the limit was raised): slow start finds the new one
in a second or two instead of a probe's minute (sharing partitions meet 429s at 1.0)."""
TICK_S = 0.25
"""How often the rate is adjusted and the rate sent is measured."""
ACCEPTED_TICKS = 4
"""Ticks of accepted answers a cut looks back on (a second: a usual limit's window)."""


class RateController:
    """Paces one partition's requests at a rate found by AIMD; see the module docstring.

    Per request: ``wait = reserve()`` (seconds to sleep before sending; 0 on the fast
    path), ``await wait_for_slot(wait)`` if it is not 0, then ``sending()`` as the call
    goes out. Per answer: :meth:`accepted` for one the server worked on, :meth:`throttled`
    for a 429 or a 503 with ``Retry-After``, :meth:`observe_quota` for rate-limit headers.
    ``window`` and ``share`` tell sustained throttling from isolated 429s (the config's
    ``throttle_window`` and ``throttle_share``); a given rate's every send time is also
    taken from the ``neighbours``' schedule, and :meth:`leave` ends it.
    """

    def __init__(
        self,
        ceiling: float | None = None,
        *,
        window: int = defaults.THROTTLE_WINDOW,
        share: float = defaults.THROTTLE_SHARE,
        neighbours: Neighbours | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ceiling is not None and not ceiling > 0:
            raise ValueError(f"ceiling must be > 0 requests/s, got {ceiling!r}")
        if window < 1 or not 0 < share <= 1:
            raise ValueError(f"need window >= 1 and share in (0, 1], got {window!r}, {share!r}")
        self.ceiling = ceiling
        self.ceiling_hint: float | None = None  # accepted at the last cut (w_max)
        self.slow_start = ceiling is None
        self.rate = ceiling or START_RATE
        self.decreases = 0
        self.epoch = 0  # changes with every cut or pause: waiting slots are taken anew
        self._policy_rate: float | None = None
        self._stated = False  # an answer stated a quota: the API has a limit
        self._neighbours = neighbours  # joined at the first send
        self._shared = neighbours if ceiling is not None else None  # a given rate's schedule
        self._board = neighbours if ceiling is None else None  # what they found, if none given
        self._joined = neighbours is None
        self._clock = clock
        now = clock()
        self._born = now
        self._interval = 1.0 / self.rate
        self._next = now  # GCRA: when the next send may go
        self._paused_until = now
        self._last_cut = -math.inf
        self._probe_since: float | None = None  # probing above APPROACH since then
        self._tick_at = now + TICK_S
        self._tick_start = now
        self._tick_sends = 0
        self._sent_rate = 0.0
        self._tick_accepted = 0
        self._accepted_ticks = [0] * ACCEPTED_TICKS  # the last second's, a tick each
        self._accepted_index = 0
        self._window = window
        self._sustained_at = share * window  # 429s among the last `window` answers
        self._recent: deque[bool] = deque()  # True: throttled; since the last cut
        self._recent_throttled = 0
        self._run = 0  # throttled answers in a row, since the last cut
        self._held_back = False  # a send waited for its slot this tick: more is wanted
        self._peak_accepted = 0.0  # the most accepted over a second, at a tick

    def found(self) -> Found | None:
        """What this partition found of the API's rate, for its successor: the share at
        its last cut, else (still in slow start) the most it was accepted at."""
        if self.ceiling_hint is not None:
            return Found(self.ceiling_hint, limited=True)
        self._note_peak(self._clock())
        if self.slow_start and self._peak_accepted > 0:
            return Found(self._peak_accepted, limited=False)
        return None

    def leave(self) -> None:
        """The partition ends: its place among the neighbours is given back, and what it
        found (of a limit nobody gave) left to its successor."""
        if self._neighbours is not None:
            found = self.found() if self.ceiling is None else None
            self._neighbours.leave(found, self._clock())
            self._neighbours = self._shared = self._board = None
            self._joined = True  # alone from here on

    def _note_peak(self, now: float) -> None:
        """The most answers accepted per second so far, over the last second or the
        partition's life if shorter (a floor for its successor, not a cut's evidence:
        every one of them was accepted)."""
        span = min(ACCEPTED_TICKS * TICK_S + (now - self._tick_start), now - self._born)
        accepted = sum(self._accepted_ticks) + self._tick_accepted
        if span >= TICK_S:
            self._peak_accepted = max(self._peak_accepted, accepted / span)

    def _now(self) -> float:
        """The clock; at the first send, the place among the neighbours taken too."""
        now = self._clock()
        if not self._joined:
            self._join(now)
        return now

    def _join(self, now: float) -> None:
        """Take a place among the neighbours at the first send (not before: a task still
        reading its input uses no share), and start at what they found: a share the rate
        climbs to from what the others leave unused, or a floor slow start goes on from."""
        self._joined = True
        assert self._neighbours is not None  # only a controller with neighbours joins
        found = self._neighbours.join(now)
        if found is None or self._board is None:
            return
        if found.limited:
            self.ceiling_hint, self.slow_start = found.rate, False
            self._set_rate(min(APPROACH * found.rate, found.spare))
        else:
            self._set_rate(max(self.rate, found.rate))
        self._born = self._tick_start = self._next = now
        self._tick_at = now + TICK_S

    def reserve(self) -> float:
        """Take the next send slot; returns how many seconds to wait before sending."""
        now = self._now()
        due = self._next if self._next > now else now  # GCRA's theoretical arrival time
        start = due - self._burst_s()
        if start < now:
            start = now
        if self._paused_until > start:
            start = due = self._paused_until
        if self._shared is not None:
            start = due = self._shared.reserve(start)
        self._next = due + self._interval
        if start > now:
            self._held_back = True
        return start - now

    def try_reserve(self) -> bool:
        """Take a send slot only if one is free right now (a hedge never waits)."""
        now = self._now()
        if self._next - self._burst_s() > now or self._paused_until > now:
            self._held_back = True
            return False
        if self._shared is not None and not self._shared.try_reserve(now):
            return False
        self._next = max(self._next, now) + self._interval
        return True

    def _burst_s(self) -> float:
        """How far ahead of its slot a send may go: a tick while ramping, else none."""
        return TICK_S if self._ramping() else 0.0

    def _ramping(self) -> bool:
        """In the first slow start, before any limit was met or stated: a send may go a
        tick ahead of its slot, and slots taken at a rate outgrown are taken anew.

        Answers come in bursts (the loop reads many at once) and their records' next
        calls are ready together: spaced out at ``1/rate`` each, three of five calls
        waited for a slot on an API that states no limit, holding a fifth of the
        capacity, and a partition's first ``capacity`` calls waited up to ``capacity /
        START_RATE`` seconds for slots taken before the rate grew
        (``benchmarks/peers/profile_job.py``: 0.77-0.83x the records/s without). A
        tick's burst is a small overshoot of a limit about to be met; once one was, the
        GCRA holds one token (a slow start towards a share that grew would spend the
        limit's window at once). An API that states its quota (rate-limit headers) has a
        limit about to be met as well: against Azure's emulator, whose 1 s request window
        its capacity can outrun, the tick's burst tripled the 429s of the first "minute"
        (16 against 4 to 5, ``make bench-providers``)."""
        return self.slow_start and not self.decreases and not self._stated

    async def wait_for_slot(self, wait: float) -> None:
        """Sleep ``wait`` seconds, a tick at a time; if the rate was cut or sends paused
        meanwhile, the slot was taken at a rate the server refuses, and if a ramp outgrew
        it, at one too slow: take a new one (and so on)."""
        while wait > 0:
            epoch = self.epoch
            nap = wait if wait <= TICK_S else TICK_S  # a ramp may take it anew sooner
            await asyncio.sleep(nap)
            wait = self.reserve() if self.epoch != epoch else wait - nap

    def sending(self) -> None:
        """A call goes out now: counts towards the rate sent, which paces the growth."""
        self._tick_sends += 1
        now = self._clock()
        if now >= self._tick_at:
            self._adjust(now)

    def accepted(self) -> None:
        """An answer the server worked on (not throttled)."""
        self._tick_accepted += 1
        self._observe(False)

    async def acquire(self) -> None:
        """``reserve``, ``wait_for_slot`` and ``sending`` in one (for tests and tools)."""
        wait = self.reserve()
        if wait > 0:
            await self.wait_for_slot(wait)
        self.sending()

    def throttled(
        self, retry_after: float | None, sent_at: float, *, limited: bool = False
    ) -> None:
        """A throttled answer to a call sent at ``sent_at`` (this controller's clock).

        It cuts the rate and pauses every send only for a rate limit: ``limited`` (its
        rate-limit headers say so) or a sustained share of 429s; an isolated one only
        delays its own record, through the retry's ``Retry-After``. A 429 of a call sent
        before the last cut is old news about a rate no longer sent and is not counted.
        """
        if sent_at >= self._last_cut:
            self._observe(True)
        if limited or self._sustained():
            self._back_off(retry_after, sent_at)

    def observe_quota(self, hint: QuotaHint, sent_at: float) -> None:
        """Rate-limit headers: a policy's rate caps ours; a spent quota is a throttle
        without its 429 (the next call would meet one), paused until the reset."""
        self._stated = True
        policy = hint.policy_rate
        if policy is not None and policy > 0 and policy != self._policy_rate:
            self._policy_rate = max(policy, MIN_RATE)
            self._set_rate(self.rate)
        if hint.exhausted:
            self._back_off(hint.reset_s, sent_at)

    def _back_off(self, retry_after: float | None, sent_at: float) -> None:
        """A rate limit: pause every send for ``retry_after``; cut unless just cut."""
        now = self._clock()
        if retry_after is not None and math.isfinite(retry_after) and retry_after > 0:
            pause = now + min(retry_after, MAX_RESET_S)
            if pause > self._paused_until:
                self._paused_until = pause
                self.epoch += 1
        if sent_at >= self._last_cut and now >= self._last_cut + CUT_INTERVAL_S:
            self._cut(now)

    def _observe(self, throttled: bool) -> None:
        """One more answer in the window of the last ``window`` (since the last cut)."""
        recent = self._recent
        if len(recent) >= self._window:
            self._recent_throttled -= recent.popleft()
        recent.append(throttled)
        self._recent_throttled += throttled
        self._run = self._run + 1 if throttled else 0

    def _sustained(self) -> bool:
        """Throttling that is a rate limit, not isolated 429s: a share or a run."""
        return self._recent_throttled >= self._sustained_at or self._run >= THROTTLED_RUN

    def _cut(self, now: float) -> None:
        """The new rate and the climb's target from what the server accepted (it lags
        behind a fast climb, so it is low on leaving slow start; the probe regains the
        rest). A target from the rate tried would sit above the limit, where a share of
        429s too small to count as sustained would go on and on."""
        hint = self.ceiling_hint
        if hint is not None and now - self._born < ACCEPTED_TICKS * TICK_S:
            # Too young to have measured its share: the rate gives way, the share found
            # (the executor's, a predecessor's) stands.
            base = min(self.rate, hint)
        else:
            attempted = min(self.rate, self._sent_rate) if self._sent_rate > 0 else self.rate
            accepted = self._accepted_rate(now)
            base = min(self.rate, accepted) if accepted > 0 else attempted
            self.ceiling_hint = base
            if self._board is not None:
                self._board.record_cut(base, now)
        self.slow_start = False
        self._last_cut = now
        self._probe_since = None
        self.decreases += 1
        self.epoch += 1
        self._next = now  # slots taken at the old rate are taken anew at the new one
        self._recent.clear()  # the next cut needs fresh evidence, about the new rate
        self._recent_throttled = self._run = 0
        self._set_rate(base * BETA)

    def _adjust(self, now: float) -> None:
        """Measure the rate sent over the last tick and, unless paused, grow the rate."""
        elapsed = now - self._tick_start
        self._sent_rate = self._tick_sends / elapsed if elapsed > 0 else self._sent_rate
        self._accepted_ticks[self._accepted_index] = self._tick_accepted
        self._accepted_index = (self._accepted_index + 1) % ACCEPTED_TICKS
        self._tick_start, self._tick_sends, self._tick_at = now, 0, now + TICK_S
        self._tick_accepted = 0
        accepted = self._accepted_rate(now)
        self._note_peak(now)
        if self._board is not None:
            self._board.publish(accepted, now, self._held_back)
        self._held_back = False
        if now < self._paused_until:
            return
        hint = self._executor_hint(now)  # first: it may move the rate
        rate = self.rate
        if self.slow_start:
            rate *= SLOW_START_GROWTH**elapsed
        elif hint is not None and rate < APPROACH * hint:
            rate += max((APPROACH * hint - rate) * min(1.0, elapsed), MIN_RATE * elapsed)
        elif hint is not None and rate > STALE_HINT * hint:
            self.ceiling_hint = None  # well above the last limit and no 429: it moved
            self.slow_start = True
        else:  # probing: faster the longer no 429 came (CUBIC's convex part)
            if self._probe_since is None:
                self._probe_since = now
            speed_up = 2.0 ** ((now - self._probe_since) / PROBE_DOUBLING_S)
            rate += max(PROBE * (hint or rate), PROBE_MIN) * speed_up * elapsed
        used = max(2.0 * self._sent_rate, START_RATE)  # grow only a rate that is used
        rate = min(rate, max(used, self.rate))
        if self._ramping() and self._next > now + 2 * TICK_S:  # waits beyond this tick...
            self._next = now  # ...for slots of the old rate: taken anew at the new one
            self.epoch += 1
        self._set_rate(rate)

    def _executor_hint(self, now: float) -> float | None:
        """The share found, moved to the neighbours' fair share where that is well off
        it: above, a neighbour left or wants no more; below, one joined or wants more,
        and the rate gives way at once, not at the next 429s."""
        hint = self.ceiling_hint
        if self._board is None or hint is None or self.slow_start:
            return hint
        fair = self._board.fair_share(now)
        if fair is not None and fair > STALE_HINT * hint:
            self.ceiling_hint = hint = fair
        elif fair is not None and fair * STALE_HINT < hint:
            self._set_rate(self.rate * fair / hint)
            self.ceiling_hint = hint = fair
        return hint

    def _accepted_rate(self, now: float) -> float:
        """Answers accepted per second over the last ACCEPTED_TICKS ticks and this one.
        A partition younger than that still divides by the whole span: a limit's window
        of a second accepts its quota within a fraction of it, and so many answers in
        half a second are not twice the rate the limit allows."""
        span = ACCEPTED_TICKS * TICK_S + (now - self._tick_start)
        return (sum(self._accepted_ticks) + self._tick_accepted) / span

    def _set_rate(self, rate: float) -> None:
        rate = max(rate, MIN_RATE)
        for cap in (self.ceiling, self._policy_rate):  # a given ceiling wins over MIN_RATE
            if cap is not None and rate > cap:
                rate = cap
        self.rate = rate
        self._interval = 1.0 / self.rate
