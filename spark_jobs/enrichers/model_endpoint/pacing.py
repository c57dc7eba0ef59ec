"""Token-aware pacing of a model endpoint, beside the request-rate controller.

The HTTP sender already paces *requests* (``rate_control.py``: a ``requests_per_minute``
ceiling, AIMD under 429s, pauses for ``Retry-After`` and spent quotas). A model endpoint
also limits *tokens* per minute, and a request's tokens are known only from its answer's
``usage``. So each call first reserves its estimated tokens in a :class:`TokenBucket`
(the prompt's estimate plus the completion expected: the running mean of the answers'
completions so far, never above ``max_tokens``), and its answer settles the reservation:
what it did not use goes back, what it used beyond is taken. Waiting calls wake on every
settlement, so room a short answer left is used at once.

Limits come from the spec (``tokens_per_minute``, ``requests_per_minute``) or, as the
answers come, from the provider's headers (``limits.py``); the lower wins, and each is
kept at ``LIMIT_SHARE`` of the stated limit, the margin for the estimates' error. A
reported remaining that the calls sent since (and those still out) leave below the next
reservation pauses the bucket until the reset.
Headers that state nothing usable leave the configured limits alone.

What the headers say is left of the provider's window (``remaining`` tokens until
``reset``) in the window a partition starts in is spendable now, not only at the rate: a
run starts at any point of a window and, paced from an empty bucket, would leave most of
that window unused (a hand-written loop that sends until it is refused fills it, and
pays in 429s). Each answer counted in that first window grants the bucket a *credit*
until the reset: this partition's share of ``LIMIT_SHARE`` of the
remaining, less what the count may not hold yet (every call admitted after the answered
one, answered or not, and those before it still out), what the bucket holds and what the
rate will release before the reset; it ends a round trip before the reset (a burst
landing in the next window, on top of that window's paced share, is what drew 429s when
it did not). Calls take from the bucket first and from the credit only beyond it, so the
bucket never saves up a burst while the credit pays. After the first window the rate
alone fills 0.98 of each window: a credit there, spent at each window's end from a
remaining the other partitions spend too, filled windows to the last token and drew 429s
at the end of every other one (1.5-2.3 % of the calls in ``make bench-model``). A
provider whose window is fixed, not a bucket, has each later window's share sent from
its start instead (``fixed_window.py``; no partition can spend another's share there).

The spend under ``--max-cost`` is reserved and settled the same way, in micro units of
the price's currency, against the run's ledger (``RequestBudget``): the reservation
prices ``max_tokens`` of completion, so the run stops before a call could cross it.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from spark_jobs.asyncwait import untimed

from ..attempt import Reply
from ..rate_control import RateController
from ..rate_headers import QuotaHint
from ..request_budget import RequestBudget
from .answers import usage
from .config import ModelConfig
from .fixed_window import FixedWindow
from .freed_tokens import FreedTokens
from .limits import provider_limits
from .tokens import prompt_tokens

LIMIT_SHARE = 0.98
"""The share of a token or request limit paced for: the estimates' margin."""
WINDOW_SHARE = 0.995
"""The share of a fixed window's limit spent (``fixed_window.py``): only the estimates of
the calls still out at its end can be wrong, not when a call is counted."""
BURST_S = 1.0
"""Seconds of tokens a bucket saves up when idle. It starts empty: a full bucket at the
start would add its burst to the first window's paced tokens, over a fixed window's limit."""
COST_UNITS = 1_000_000
"""Budget units per unit of currency: the ledger counts micro-dollars (or -euros)."""
_MEAN_WEIGHT = 0.1
PROMPT_RATIO = (0.1, 4.0)
"""Bounds of the learned ratio of the prompt tokens counted to those estimated: an
estimate that counts the whole ``response_format`` schema where the provider does not
(or a tokenizer unlike the provider's) reserves the ratio, not a multiple, of a call."""


class TokenBucket:
    """Tokens refilled at ``per_second`` up to ``BURST_S`` of them (or one large call),
    from none at the start."""

    def __init__(self, per_second: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.per_second = per_second
        self._level = 0.0
        self._at = clock()
        self.paused_until = -math.inf
        self._credit, self._credit_until = 0.0, -math.inf
        self._freed = FreedTokens()

    @property
    def burst(self) -> float:
        return self.per_second * BURST_S

    def set_rate(self, per_second: float) -> None:
        self._refill()
        self.per_second = per_second
        self._level = min(self._level, self.burst)

    def _refill(self) -> float:
        now = self._clock()
        start = max(self._at, self.paused_until)  # a paused bucket does not fill
        if now > start:
            self._level = min(self.burst, self._level + (now - start) * self.per_second)
        self._at = now
        return now

    def pause(self, until: float) -> None:
        """Nothing taken before ``until`` (the provider's window is spent), and nothing
        saved up meanwhile: the tokens of a spent window, spent at the next one's start,
        would be a burst on top of its rate."""
        self._refill()
        self.paused_until = max(self.paused_until, until)

    @property
    def level(self) -> float:
        """The tokens the bucket holds now (its credit aside)."""
        self._refill()
        return self._level

    def grant(self, tokens: float, until: float) -> None:
        """A credit of ``tokens`` beyond the rate, spendable until ``until`` (replacing the
        last one: each grant is computed from the provider's latest count)."""
        self._credit, self._credit_until = max(0.0, tokens), until
        if tokens > 0:
            self._freed.notify()

    @property
    def credit(self) -> float:
        """The credit spendable now (none while paused or once it ended)."""
        return self._spare(self._clock())

    def _spare(self, now: float) -> float:
        return self._credit if self.paused_until <= now < self._credit_until else 0.0

    def wait_for(self, tokens: float) -> float:
        """Seconds until ``tokens`` may be taken (0: take them now)."""
        now = self._refill()
        if tokens <= self._spare(now):
            return 0.0
        need = min(tokens, self.burst)  # a call larger than the burst waits for a full bucket
        wait = max(0.0, (need - self._level) / self.per_second)
        return max(wait, self.paused_until - now)

    def take(self, tokens: float) -> bool:
        """Take ``tokens``: from the level when it holds them, else from the credit when
        it covers them (True), else from the level (below zero: a call larger than the
        burst). The level first: a bucket left to fill while the credit pays would spend
        its burst after the credit ended, in the next window, on top of that one's rate."""
        now = self._refill()
        if tokens > self._level and tokens <= self._spare(now):
            self._credit -= tokens
            return True
        self._level -= tokens
        return False

    def give(self, tokens: float) -> None:
        """Settle: ``tokens`` back (negative: taken beyond the reservation)."""
        self._refill()
        self._level = min(self.burst, self._level + tokens)
        if tokens > 0:
            self._freed.notify()

    async def acquire(self, tokens: float) -> bool:
        """Take ``tokens`` once there is room, waking early when a settlement frees some;
        True when the credit paid them."""
        await self._freed.wait(partial(self.wait_for, tokens))
        return self.take(tokens)


@dataclass
class Admission:
    """What one call reserved: tokens, and budget units of cost."""

    tokens: float
    prompt: int
    cost_units: int
    sent_at: float = -math.inf
    """When the call was admitted (the clock's): a reset its answer states counts from it."""
    order: int = 0
    """Its place among this partition's admissions (1, 2, ...; 0: none)."""
    admitted_after: float = 0.0
    """The partition's total of admitted tokens once this call was: what was admitted
    after it is the total now less this."""
    window: int | None = None
    """The fixed window (its number) the call was taken in; None: the bucket's, or none."""
    paced: bool = True
    """Taken from the bucket's level. The calls sent before any limit was known took
    nothing, and those the credit paid took from the credit, so their settlement gives
    nothing back: their unused reservations, added to the level, were tokens beyond the
    rate (429s at the end of the first full window). The credit is computed again from
    the next answer's count, which holds what such a call used."""


class ModelPacing:
    """The sender's ``CallPacing`` for a model endpoint: tokens, cost, usage counters."""

    def __init__(
        self,
        config: ModelConfig,
        partitions: int,
        cost_budget: RequestBudget | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._partitions = partitions
        self._budget = cost_budget
        self._clock = clock
        self._configured = config.tokens_per_minute
        self.bucket: TokenBucket | None = None
        self.window = FixedWindow(config.limits_window_s, clock)
        if self._configured:
            self._set_limit(self._configured)
        self._completion = float(config.completion_reserve)
        self._prompt_ratio = 1.0  # what the provider counts per token estimated, learned
        self._first_window_ends: float | None = None  # the window a credit is granted in
        self._in_flight: dict[int, float] = {}  # order -> tokens of calls not settled yet
        self._admissions = 0
        self._admitted = 0.0  # tokens reserved by every call admitted so far
        self.prompt_tokens = 0
        self.completion_tokens = 0

    def _share(self, per_window: float) -> float:
        """This partition's tokens per second of a limit per ``limits_window_s``."""
        return per_window * LIMIT_SHARE / self.config.limits_window_s / self._partitions

    async def admit(self, body: str | None) -> Admission:
        """Reserve the call's cost (``BudgetExhausted`` when the run's is spent) and its
        tokens (waiting, ``untimed``, for room)."""
        prompt = prompt_tokens(body or "")
        units = 0
        if self._budget is not None:
            cost = self.config.cost(prompt, self.config.completion_reserve)
            units = max(1, math.ceil(cost * COST_UNITS))
            await self._budget.spend(units)
        tokens = prompt * self._prompt_ratio + self._completion
        async with untimed():
            window, paced = await self._reserve(tokens)
        self._admissions += 1
        self._admitted += tokens
        self._in_flight[self._admissions] = tokens
        return Admission(
            tokens, prompt, units, self._clock(), self._admissions, self._admitted, window, paced
        )

    async def _reserve(self, tokens: float) -> tuple[int | None, bool]:
        """Take ``tokens`` from the fixed window (returned) or else the bucket (True: from
        its level). A call that waited in the bucket while the window turned fixed is
        the window's: taken from both, it would be tokens beyond the window's share."""
        if not self.window.fixed:
            if self.bucket is None:
                return None, False
            paced = not await self.bucket.acquire(tokens)
            if not self.window.fixed:
                return None, paced
            if paced:
                self.bucket.give(tokens)
        return await self.window.acquire(tokens), False

    def settle(self, admitted: Admission, reply: Reply | None, rate: RateController) -> None:
        """The answer's usage settles the reservation; its headers steer the limits. No
        reply (a transport failure) keeps the reservation: the call may have been served."""
        used_tokens, used_units = admitted.tokens, admitted.cost_units
        self._in_flight.pop(admitted.order, None)
        if reply is not None:
            self._observe(reply, rate, admitted)
            used_tokens, used_units = 0.0, 0
            if 200 <= reply.status < 300:
                used_tokens, used_units = self._used(reply, admitted)
        if admitted.window is not None:
            self.window.give(admitted.tokens - used_tokens, admitted.window)
        elif self.bucket is not None and admitted.paced:
            self.bucket.give(admitted.tokens - used_tokens)
        if self._budget is not None:
            self._budget.settle(admitted.cost_units, used_units)

    def _used(self, reply: Reply, admitted: Admission) -> tuple[float, int]:
        try:
            counted = usage(json.loads(reply.payload), self.config.api)
        except (ValueError, RecursionError):
            counted = None
        if counted is None:  # no usage: the estimate stands
            prompt, completion = admitted.prompt, self.config.completion_reserve
        else:
            prompt, completion = counted
            self._completion += _MEAN_WEIGHT * (completion - self._completion)
            self._completion = min(self._completion, self.config.completion_reserve)
            if admitted.prompt > 0:
                ratio = self._prompt_ratio + _MEAN_WEIGHT * (
                    prompt / admitted.prompt - self._prompt_ratio
                )
                self._prompt_ratio = min(max(ratio, PROMPT_RATIO[0]), PROMPT_RATIO[1])
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        units = math.ceil(self.config.cost(prompt, completion) * COST_UNITS)
        return float(prompt + completion), units

    def _observe(self, reply: Reply, rate: RateController, admitted: Admission) -> None:
        limits = provider_limits(reply.headers)
        if limits is None:
            return
        window = self.config.limits_window_s
        if limits.requests_limit is not None:
            rpm = self.config.requests_per_minute
            stated = limits.requests_limit * LIMIT_SHARE / self._partitions
            rate.observe_quota(QuotaHint(limit=min(stated, rpm or stated), window_s=window), 0.0)
        if limits.requests is not None:
            rate.observe_quota(limits.requests, self._clock())
        if limits.tokens_limit is not None:
            self._set_limit(min(limits.tokens_limit, self._configured or limits.tokens_limit))
        bucket = self.bucket
        remaining, reset = limits.tokens_remaining, limits.tokens_reset_s
        if bucket is None or remaining is None or not reset:
            return
        left = remaining - self._uncounted(admitted)
        self.window.observe(admitted.sent_at, self._clock(), reset, left)
        if self.window.fixed:  # its share, not the rate nor a credit
            return
        if left < admitted.tokens:
            bucket.pause(self._clock() + reset)
            return
        ends = admitted.sent_at + reset  # the earliest end of the window it was counted in
        if self._first_window_ends is None:
            self._first_window_ends = ends
        if ends < self._first_window_ends + self.config.limits_window_s / 2:
            self._grant(bucket, remaining, reset, admitted)

    def _set_limit(self, per_window: float) -> None:
        """Pace for ``per_window`` tokens (the bucket's rate, the fixed window's share)."""
        per_second = self._share(per_window)
        if self.bucket is None:
            self.bucket = TokenBucket(per_second, self._clock)
        elif abs(self.bucket.per_second - per_second) > 1e-9:
            self.bucket.set_rate(per_second)
        self.window.allowance = per_window * WINDOW_SHARE / self._partitions

    def _grant(self, bucket: TokenBucket, remaining: float, reset: float, call: Admission) -> None:
        """The credit of what is left of the provider's window (see the module's doc).

        The window ends ``reset`` after the provider counted, which was between the call's
        sending and now: what the rate releases is counted to its latest end, the credit
        is spent by its earliest less a round trip (a call sent later may be counted in
        the next window, which the credit is not from)."""
        now = self._clock()
        until = call.sent_at + reset - (now - call.sent_at)
        share = remaining * LIMIT_SHARE / self._partitions
        released = bucket.per_second * reset
        bucket.grant(share - self._uncounted(call) - max(0.0, bucket.level) - released, until)

    def _uncounted(self, call: Admission) -> float:
        """Tokens the count in ``call``'s answer may not hold: every call admitted after
        it (answered already or not: answers can overtake each other) and the calls
        before it still out (one sent earlier may have arrived later)."""
        after = self._admitted - call.admitted_after
        return after + sum(t for order, t in self._in_flight.items() if order < call.order)

    @property
    def counters(self) -> dict[str, int]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens}
