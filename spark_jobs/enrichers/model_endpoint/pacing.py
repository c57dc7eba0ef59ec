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
reported remaining below the next reservation pauses the bucket until the reset.
Headers that state nothing usable leave the configured limits alone.

The spend under ``--max-cost`` is reserved and settled the same way, in micro units of
the price's currency, against the run's ledger (``RequestBudget``): the reservation
prices ``max_tokens`` of completion, so the run stops before a call could cross it.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from spark_jobs.asyncwait import untimed

from ..attempt import Reply
from ..rate_control import RateController
from ..rate_headers import QuotaHint
from ..request_budget import RequestBudget
from .answers import usage
from .config import ModelConfig
from .limits import provider_limits
from .tokens import prompt_tokens

LIMIT_SHARE = 0.98
"""The share of a token or request limit paced for: the estimates' margin."""
BURST_S = 1.0
"""Seconds of tokens a bucket saves up when idle. It starts empty: a full bucket at the
start would add its burst to the first window's paced tokens, over a fixed window's limit."""
COST_UNITS = 1_000_000
"""Budget units per unit of currency: the ledger counts micro-dollars (or -euros)."""
_MEAN_WEIGHT = 0.1


class TokenBucket:
    """Tokens refilled at ``per_second`` up to ``BURST_S`` of them (or one large call),
    from none at the start."""

    def __init__(self, per_second: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.per_second = per_second
        self._level = 0.0
        self._at = clock()
        self.paused_until = -math.inf
        self._changed: asyncio.Event | None = None

    @property
    def burst(self) -> float:
        return self.per_second * BURST_S

    def set_rate(self, per_second: float) -> None:
        self._refill()
        self.per_second = per_second
        self._level = min(self._level, self.burst)

    def _refill(self) -> float:
        now = self._clock()
        self._level = min(self.burst, self._level + (now - self._at) * self.per_second)
        self._at = now
        return now

    def wait_for(self, tokens: float) -> float:
        """Seconds until ``tokens`` may be taken (0: take them now)."""
        now = self._refill()
        need = min(tokens, self.burst)  # a call larger than the burst waits for a full bucket
        wait = max(0.0, (need - self._level) / self.per_second)
        return max(wait, self.paused_until - now)

    def take(self, tokens: float) -> None:
        self._refill()
        self._level -= tokens

    def give(self, tokens: float) -> None:
        """Settle: ``tokens`` back (negative: taken beyond the reservation)."""
        self._refill()
        self._level = min(self.burst, self._level + tokens)
        if tokens > 0 and self._changed is not None:
            self._changed.set()

    async def acquire(self, tokens: float) -> None:
        """Take ``tokens`` once there is room, waking early when a settlement frees some."""
        while (wait := self.wait_for(tokens)) > 0:
            if self._changed is None:
                self._changed = asyncio.Event()
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), wait)
            except TimeoutError:
                pass
        self.take(tokens)


@dataclass
class Admission:
    """What one call reserved: tokens, and budget units of cost."""

    tokens: float
    prompt: int
    cost_units: int
    paced: bool = True
    """Taken from the bucket. The calls sent before any limit was known took nothing, so
    their settlement gives nothing back: their unused reservations, added to a bucket
    made since, were tokens beyond the rate (429s at the end of the first full window)."""


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
        if self._configured:
            self.bucket = TokenBucket(self._share(self._configured), clock)
        self._completion = float(config.completion_reserve)
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
        tokens = prompt + self._completion
        if self.bucket is not None:
            async with untimed():
                await self.bucket.acquire(tokens)
        return Admission(tokens, prompt, units, paced=self.bucket is not None)

    def settle(self, admitted: Admission, reply: Reply | None, rate: RateController) -> None:
        """The answer's usage settles the reservation; its headers steer the limits. No
        reply (a transport failure) keeps the reservation: the call may have been served."""
        used_tokens, used_units = admitted.tokens, admitted.cost_units
        if reply is not None:
            self._observe(reply, rate, admitted.tokens)
            used_tokens, used_units = 0.0, 0
            if 200 <= reply.status < 300:
                used_tokens, used_units = self._used(reply, admitted)
        if self.bucket is not None and admitted.paced:
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
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        units = math.ceil(self.config.cost(prompt, completion) * COST_UNITS)
        return float(prompt + completion), units

    def _observe(self, reply: Reply, rate: RateController, reserved: float) -> None:
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
            stated = min(limits.tokens_limit, self._configured or limits.tokens_limit)
            if self.bucket is None:
                self.bucket = TokenBucket(self._share(stated), self._clock)
            elif abs(self.bucket.per_second - self._share(stated)) > 1e-9:
                self.bucket.set_rate(self._share(stated))
        bucket = self.bucket
        remaining, reset = limits.tokens_remaining, limits.tokens_reset_s
        if bucket is not None and remaining is not None and reset and remaining < reserved:
            bucket.paused_until = max(bucket.paused_until, self._clock() + reset)

    @property
    def counters(self) -> dict[str, int]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens}
