"""The demo model endpoint's batches: what a provider does with a batch between its
creation and its end, on a clock that compresses the "24 h" completion window to seconds.

One batch of either provider (``batch_api.py`` speaks their protocols) is a list of
``(custom_id, body)`` requests. It validates for ``validate_s``, then processes its
requests in order, evenly over ``process_s`` (the first at once; each answered by
``ModelApi.batch_answer``: the answer the same prompt gets online), and ends when all are
done, when it is cancelled (after ``cancel_s`` of cancelling) or when its window
(``day_s``) runs out first: expired, with the answers it has. Every ``fail_every``-th
custom_id (by its hash) errors, as requests of a batch do one by one; an errored request
is not charged. ``charged`` counts the requests charged per custom_id (a request paid
twice shows) and ``created`` the batches made.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

DAY_S = 86_400.0

Outcome = Literal["succeeded", "errored", "expired", "canceled"]


@dataclass(frozen=True)
class BatchLimits:
    """What one batch may hold, as each provider documents it."""

    requests: int
    bytes: int


OPENAI_LIMITS = BatchLimits(requests=50_000, bytes=200 * 2**20)
"""OpenAI's Batch API: an input file of up to 50 000 requests and 200 MB."""
ANTHROPIC_LIMITS = BatchLimits(requests=100_000, bytes=256 * 2**20)
"""Anthropic's Message Batches: up to 100 000 requests or 256 MB, whichever comes first."""


@dataclass
class BatchKnobs:
    """How fast batches run, and how they fail."""

    day_s: float = 4.0
    """The completion window's 24 h, in seconds: a batch not done by then expires."""
    process_s: float = 0.4
    """Seconds from the end of validation until every request is done (more than
    ``day_s``: every batch expires part done)."""
    validate_s: float = 0.05
    cancel_s: float = 0.05
    fail_every: int = 0
    """Every Nth custom_id (by its hash) errors; 0: none."""
    max_requests: int | None = None
    """A smaller request limit than the provider's (tests of the split)."""


@dataclass
class Result:
    """One request's outcome: its kind, and for an answer or an error its document."""

    outcome: Outcome
    document: dict[str, Any] | None = None


@dataclass
class Batch:
    """One batch and its progress (``advance`` moves it on to the clock's now)."""

    id: str
    api: str
    """``chat``, ``embeddings`` or ``messages``: what each request asks."""
    requests: list[tuple[str, dict[str, Any]]]
    created: float
    metadata: Mapping[str, str] = field(default_factory=dict)
    failed: list[dict[str, Any]] = field(default_factory=list)
    """Validation errors: a batch that has any never runs (OpenAI ``failed``)."""
    results: dict[str, Result] = field(default_factory=dict)
    cancelled: float | None = None
    ended: float | None = None

    @property
    def done(self) -> int:
        return len(self.results)

    def counts(self) -> Counter[Outcome]:
        return Counter(result.outcome for result in self.results.values())


Answer = Callable[[str, Mapping[str, Any]], dict[str, Any]]
"""(api, body) -> the answer document with its usage (``ModelApi.batch_answer``)."""


class BatchClock:
    """Real seconds and the provider's time: ``day_s`` real seconds make a day."""

    def __init__(self, day_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock, self._start, self._wall = clock, clock(), time.time()
        self.scale = DAY_S / day_s

    def now(self) -> float:
        return self._clock()

    def provider_time(self, at: float) -> float:
        """``at`` (``now()``'s) as the provider's unix time, its days compressed."""
        return self._wall + (at - self._start) * self.scale


class BatchJobs:
    """Every batch of the endpoint, by id, in creation order; ``advance`` runs them."""

    def __init__(self, knobs: BatchKnobs, answer: Answer) -> None:
        self.knobs = knobs
        self.clock = BatchClock(knobs.day_s)
        self._answer = answer
        self.batches: dict[str, Batch] = {}
        self.charged: Counter[str] = Counter()
        self.created = 0

    def create(
        self,
        prefix: str,
        api: str,
        requests: list[tuple[str, dict[str, Any]]],
        metadata: Mapping[str, str] | None = None,
        failed: list[dict[str, Any]] | None = None,
    ) -> Batch:
        self.created += 1
        token = hashlib.sha256(f"{prefix}{self.created}{time.time()}".encode()).hexdigest()
        batch = Batch(
            f"{prefix}{token[:24]}",
            api,
            requests,
            self.clock.now(),
            dict(metadata or {}),
            list(failed or []),
        )
        if batch.failed:
            batch.ended = batch.created
        self.batches[batch.id] = batch
        return batch

    def cancel(self, batch: Batch) -> None:
        self.advance(batch)
        if batch.ended is None and batch.cancelled is None:
            batch.cancelled = self.clock.now()

    def advance(self, batch: Batch) -> None:
        """Process what ``batch`` has done by now; end it when its time has come."""
        if batch.ended is not None:
            return
        now, knobs = self.clock.now(), self.knobs
        expires = batch.created + knobs.day_s
        until = min(now, expires, batch.cancelled if batch.cancelled is not None else now)
        share = (until - batch.created - knobs.validate_s) / knobs.process_s
        # the i-th request is done at validate_s + i/n of process_s: the first at once
        target = min(len(batch.requests), int(share * len(batch.requests)) + 1) if share >= 0 else 0
        for custom_id, body in batch.requests[batch.done : target]:
            batch.results[custom_id] = self._process(batch.api, custom_id, body)
        if batch.done == len(batch.requests):
            batch.ended = batch.created + knobs.validate_s + knobs.process_s
        elif batch.cancelled is not None and now >= batch.cancelled + knobs.cancel_s:
            self._end(batch, "canceled", now)
        elif now >= expires:
            self._end(batch, "expired", now)

    def _end(self, batch: Batch, outcome: Outcome, now: float) -> None:
        for custom_id, _ in batch.requests[batch.done :]:
            batch.results[custom_id] = Result(outcome)
        batch.ended = now

    def _process(self, api: str, custom_id: str, body: Mapping[str, Any]) -> Result:
        every = self.knobs.fail_every
        if every and hashlib.sha256(custom_id.encode()).digest()[0] % every == 0:
            return Result("errored", {"message": f"seeded failure of {custom_id}"})
        try:
            document = self._answer(api, body)
        except ValueError as error:  # what the online endpoint answers 400
            return Result("errored", {"message": f"bad request: {error}"})
        self.charged[custom_id] += 1
        return Result("succeeded", document)

    def status(self, batch: Batch) -> str:
        """The batch's state as OpenAI names it (``batch_api.py`` maps Anthropic's)."""
        self.advance(batch)
        now = self.clock.now()
        if batch.failed:
            return "failed"
        if batch.cancelled is not None:
            return "cancelling" if batch.ended is None else "cancelled"
        if batch.ended is not None:
            expired = batch.counts()["expired"] > 0
            finalized = now >= batch.ended + self.knobs.validate_s
            return "expired" if expired else "completed" if finalized else "finalizing"
        if now < batch.created + self.knobs.validate_s:
            return "validating"
        return "in_progress"

    def stats(self) -> dict[str, Any]:
        for batch in self.batches.values():
            self.advance(batch)
        return {
            "batches_created": self.created,
            "batch_requests_charged": sum(self.charged.values()),
            "custom_ids_paid_twice": sum(1 for n in self.charged.values() if n > 1),
        }
