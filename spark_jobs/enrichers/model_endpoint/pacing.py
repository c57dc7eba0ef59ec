"""Token-aware pacing of a model endpoint, beside the request-rate controller.

The HTTP sender paces *requests* (``rate_control.py``: a ``requests_per_minute`` ceiling,
AIMD under 429s, pauses for ``Retry-After`` and spent quotas). A model endpoint also
limits *tokens*, charged as each provider documents, and this pacing charges them the
same way, each limit apart (``token_limit.py``: its shape, this partition's share):

* OpenAI and Azure OpenAI charge a request at admission its prompt tokens plus its
  ``max_tokens`` (the rate-limit guide: "the maximum of max_tokens and the estimated
  number of tokens based on the character count"), and give nothing back when the
  answer is shorter;
* Anthropic limits input and output tokens apart and charges the output at
  ``max_tokens`` at admission, adjusted to the actual output when the answer ends;
* a self-hosted server (vLLM, llama.cpp, TGI) states no limit: nothing is paced here.

A call is admitted once every limit has room for its charge (waiting ``untimed``, woken
early when an answer refunds or corrects a level); a refused call (429) was not admitted
and is refunded whole. Each answer's headers (``rate_headers.token_quotas``) correct the
levels to the provider's own count, which also corrects the prompt estimate's error.
Limits come from the spec (``tokens_per_minute``) or the headers, the lower winning, each
paced at ``LIMIT_SHARE`` of it, split evenly over the partitions that run at once.

The spend under ``--max-cost`` is reserved and settled the same way, in micro units of
the price's currency, against the run's ledger (``RequestBudget``): the reservation
prices ``max_tokens`` of completion, so the run stops before a call could cross it.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from spark_jobs.asyncwait import untimed

from ..attempt import Reply
from ..rate_control import RateController
from ..rate_headers import (
    MAX_RESET_S,
    QuotaHint,
    TokenQuota,
)
from ..request_budget import RequestBudget
from .answers import MAX_USAGE_TOKENS, usage
from .config import ModelConfig
from .token_limit import TokenLimit
from .tokens import prompt_tokens

LIMIT_SHARE = 0.98
"""The share of a token or request limit paced for: the prompt estimate's margin."""
COST_UNITS = 1_000_000
"""Budget units per unit of currency: the ledger counts micro-dollars (or -euros)."""
REFUNDS_OUTPUT = frozenset({"anthropic"})
"""Providers that adjust the output charged at ``max_tokens`` to the actual output."""
_MEAN_WEIGHT = 0.1
PROMPT_RATIO = (0.1, 4.0)
"""Bounds of the learned ratio of the prompt tokens counted to those estimated: an
estimate that counts the whole ``response_format`` schema where the provider does not
(or a tokenizer unlike the provider's) reserves the ratio, not a multiple, of a call."""

Charges = dict[str, float]
"""Tokens charged to each limit (``rate_headers.TOKEN_KINDS``)."""


@dataclass
class Admission:
    """What one call reserved: tokens per limit, and budget units of cost."""

    charges: Charges
    prompt: int
    completion: int
    cost_units: int
    sent_at: float = -math.inf
    order: int = 0
    """Its place among this partition's admissions (1, 2, ...)."""
    admitted_before: Charges = field(default_factory=dict)
    """The partition's totals charged per limit once this call was: what was charged
    after it is the total now less this."""


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
        self.limits: dict[str, TokenLimit] = {}
        if config.tokens_per_minute:
            self.limits["tokens"] = self._limit(config.tokens_per_minute)
        self._refunds_output = config.provider in REFUNDS_OUTPUT
        self._prompt_ratio = 1.0  # what the provider counts per token estimated, learned
        self._in_flight: dict[int, Charges] = {}  # order -> charges of calls out
        self._charged: Charges = {}  # per limit, every charge so far
        self._admissions = 0
        self._changed: asyncio.Event | None = None  # made in the loop that first waits
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.batch_prompt_tokens = 0  # of them, those of batch answers (their own price)
        self.batch_completion_tokens = 0

    def _limit(self, per_window: float) -> TokenLimit:
        share = LIMIT_SHARE / self._partitions
        window = self.config.limits_window_s
        return TokenLimit(per_window, window, share, self.config.tokens_per_minute, self._clock)

    async def admit(self, body: str | None) -> Admission:
        """Reserve the call's cost (``BudgetExhausted`` when the run's is spent) and its
        tokens (waiting, ``untimed``, for room)."""
        prompt = prompt_tokens(body or "")
        completion = self.config.completion_reserve
        units = 0
        if self._budget is not None:
            cost = self.config.cost(prompt, completion, "online")
            units = max(1, math.ceil(cost * COST_UNITS))
            await self._budget.spend(units)
        async with untimed():
            await self._room(prompt, completion)
        charges = self._charges(prompt, completion)
        for kind, tokens in charges.items():
            self.limits[kind].charge(tokens)
        self._admissions += 1
        before = dict(self._charged)
        for kind, tokens in charges.items():
            self._charged[kind] = self._charged.get(kind, 0.0) + tokens
        self._in_flight[self._admissions] = charges
        return Admission(
            charges, prompt, completion, units, self._clock(), self._admissions, before
        )

    def _charges(self, prompt: int, completion: int) -> Charges:
        estimate = prompt * self._prompt_ratio
        every = {"tokens": estimate + completion, "input_tokens": estimate}
        every["output_tokens"] = float(completion)
        return {kind: every[kind] for kind in self.limits}

    async def _room(self, prompt: int, completion: int) -> None:
        """Return once every limit has room for the call's charges, looking again
        whenever an answer refunds or corrects a level; or once the call has waited a
        window and ``MAX_RESET_S`` in all: wrong or hostile statements (a limit of one
        token) may slow a partition, never stall it, and the provider's answer then says."""
        give_up = self._clock() + self.config.limits_window_s + MAX_RESET_S
        while True:
            charges = self._charges(prompt, completion)  # limits may appear meanwhile
            wait = max((self.limits[k].wait_for(t) for k, t in charges.items()), default=0.0)
            wait = min(wait, give_up - self._clock())
            if wait <= 0:
                return
            if self._changed is None:
                self._changed = asyncio.Event()
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), wait)
            except TimeoutError:
                pass

    def settle(self, admitted: Admission, reply: Reply | None, rate: RateController) -> None:
        """The answer settles the reservation as the provider does; its headers correct
        the limits. No reply (a transport failure) keeps everything reserved: the call
        may have been served."""
        self._in_flight.pop(admitted.order, None)
        for kind, tokens in admitted.charges.items():
            self.limits[kind].answered(tokens)
        used_units = admitted.cost_units
        if reply is not None:
            used_units = 0
            completion = 0
            if reply.status == 429:  # refused, so not admitted: nothing was charged
                self._refund(admitted.charges)
                self._pause_refusing(reply, admitted)
            elif 200 <= reply.status < 300:
                completion, used_units = self._used(reply, admitted)
            if self._refunds_output and reply.status != 429:
                unused = admitted.completion - completion
                self._refund({k: unused for k in ("tokens", "output_tokens")})
            self._observe(reply, rate, admitted)
        if self._budget is not None:
            self._budget.settle(admitted.cost_units, used_units)

    async def reserve_batch(self, bodies: list[str]) -> int:
        """Reserve under ``--max-cost`` what a batch of ``bodies`` may cost, as it is
        created (``BudgetExhausted`` when the run's budget cannot cover it); its units.
        A batch has limits of its own: no token limit is charged."""
        if self._budget is None:
            return 0
        reserve = self.config.completion_reserve
        units = sum(
            max(1, math.ceil(self.config.cost(prompt_tokens(b), reserve, "batch") * COST_UNITS))
            for b in bodies
        )
        await self._budget.spend(units)
        return units

    def settle_batch(self, reserved: int, answers: list[bytes]) -> None:
        """A batch's answers came: count their usage, and settle its reservation by it
        (what it did not answer costs nothing)."""
        used = 0
        for payload in answers:
            try:
                counted = usage(json.loads(payload), self.config.api)
            except (ValueError, RecursionError):
                counted = None
            if counted is None or max(counted) > MAX_USAGE_TOKENS:
                continue
            self.prompt_tokens += counted[0]
            self.completion_tokens += counted[1]
            self.batch_prompt_tokens += counted[0]
            self.batch_completion_tokens += counted[1]
            used += math.ceil(self.config.cost(*counted, "batch") * COST_UNITS)
        if self._budget is not None:
            self._budget.settle(reserved, used)

    def _pause_refusing(self, reply: Reply, admitted: Admission) -> None:
        """A 429 whose headers leave a token limit less than the call's charge was that
        limit's refusal: it charges nothing until the answer's retry delay has passed."""
        delay = reply.retry_delay
        if not delay:
            return
        for kind, quota in reply.token_quotas.items():
            limit, charge = self.limits.get(kind), admitted.charges.get(kind, 0.0)
            if limit is not None and quota.remaining is not None and quota.remaining < charge:
                limit.pause(delay)

    def _refund(self, charges: Mapping[str, float]) -> None:
        for kind, tokens in charges.items():
            if kind in self.limits:
                self.limits[kind].refund(tokens)
        self._notify()

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()

    def _used(self, reply: Reply, admitted: Admission) -> tuple[int, int]:
        """(completion tokens, cost units) of an answer, from its usage where believable."""
        try:
            counted = usage(json.loads(reply.payload), self.config.api)
        except (ValueError, RecursionError):
            counted = None
        if counted is None or max(counted) > MAX_USAGE_TOKENS:  # the estimate stands
            prompt, completion = admitted.prompt, admitted.completion
        else:
            prompt, completion = counted
            if admitted.prompt > 0:
                ratio = self._prompt_ratio + _MEAN_WEIGHT * (
                    prompt / admitted.prompt - self._prompt_ratio
                )
                self._prompt_ratio = min(max(ratio, PROMPT_RATIO[0]), PROMPT_RATIO[1])
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        return completion, math.ceil(self.config.cost(prompt, completion, "online") * COST_UNITS)

    def _observe(self, reply: Reply, rate: RateController, admitted: Admission) -> None:
        """The answer's statements of the limits: the request limit caps the request
        rate, each token limit's remaining corrects its level."""
        hint = reply.quota_hint
        if hint is not None and hint.limit and hint.window_s is None:  # per limits_window_s
            stated = min(hint.limit, self.config.requests_per_minute or hint.limit)
            share = stated * LIMIT_SHARE / self._partitions
            rate.observe_quota(QuotaHint(limit=share, window_s=self.config.limits_window_s), 0.0)
        for kind, quota in reply.token_quotas.items():
            self._observe_tokens(kind, quota, admitted)
        self._notify()

    def _observe_tokens(self, kind: str, quota: TokenQuota, admitted: Admission) -> None:
        limit = self.limits.get(kind)
        if limit is None:
            per_window = quota.limit or quota.remaining
            if not per_window:
                return
            limit = self.limits[kind] = self._limit(per_window)
        limit.observe(quota, admitted.sent_at, self._uncounted(kind, admitted))

    def _uncounted(self, kind: str, call: Admission) -> float:
        """Tokens the count in ``call``'s answer may not hold: every call charged after
        it (answered already or not: answers can overtake each other) and the calls
        before it still out (one sent earlier may have arrived later)."""
        after = self._charged.get(kind, 0.0) - call.admitted_before.get(kind, 0.0)
        after -= call.charges.get(kind, 0.0)
        earlier = sum(c.get(kind, 0.0) for o, c in self._in_flight.items() if o < call.order)
        return after + earlier

    @property
    def counters(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "batch_prompt_tokens": self.batch_prompt_tokens,
            "batch_completion_tokens": self.batch_completion_tokens,
        }
