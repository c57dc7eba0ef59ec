"""A self-hosted model server's scheduler: at most ``batch`` requests in service, the rest queued.

How vLLM, llama.cpp's server and TGI serve an OpenAI-compatible API: a fixed number of
sequences decode together (vLLM's ``max_num_seqs``, llama.cpp's ``--parallel`` slots, TGI's
``max_batch_size``), later requests wait in a queue that is unbounded by default ("If all
slots are occupied, the request waits in the queue", llama.cpp's server README; vLLM's
scheduler keeps a waiting queue, https://docs.vllm.ai/en/latest/design/arch_overview.html),
no rate headers are sent and no 429 either. A bounded queue (``queue``) answers 503 once
full, as llama.cpp's server does without a free slot (TGI's ``max_concurrent_requests``
answers 429 instead).

Latency: a request's prefill (``base_s``), then one decode step per completion token; a
step's duration grows with the number of requests decoding together
(``step_s * (1 + slowdown * (in_service - 1))``, memory-bound decoding gets mildly slower
with a larger batch), so throughput is bounded by the batch and latency grows with load.
The batch size is read again every ``_STEPS_PER_LOOK`` steps rather than at each one (one
timer per token would be the emulator's cost, not the model's).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

_STEPS_PER_LOOK = 8
"""Decode steps slept at once before the batch size is read again."""


@dataclass(frozen=True)
class BatchServing:
    """The server's shape: how many requests decode at once, how long the queue may grow,
    and how long prefill and a decode step take."""

    batch: int = 8
    queue: int | None = None
    base_s: float = 0.05
    step_s: float = 0.005
    slowdown: float = 0.05

    def __post_init__(self) -> None:
        if self.batch < 1:
            raise ValueError(f"batch must be >= 1, got {self.batch!r}")
        if self.queue is not None and self.queue < 0:
            raise ValueError(f"queue must be >= 0 (or None: unbounded), got {self.queue!r}")
        for name in ("base_s", "step_s", "slowdown"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")

    def latency_s(self, completion_tokens: int, in_service: int = 1) -> float:
        """A request's service time with ``in_service`` requests decoding together."""
        step = self.step_s * (1 + self.slowdown * (in_service - 1))
        return self.base_s + completion_tokens * step

    def best_requests_per_s(self, completion_tokens: float) -> float:
        """The most requests a second this server answers: a full batch, all the time."""
        return self.batch / self.latency_s(round(completion_tokens), self.batch)


@dataclass
class BatchScheduler:
    """Admits requests into the batch in arrival order; counts what a benchmark compares."""

    serving: BatchServing = field(default_factory=BatchServing)
    in_service: int = 0
    waiting: int = 0
    max_in_service: int = 0
    max_waiting: int = 0
    served: int = 0
    completion_tokens: int = 0

    def __post_init__(self) -> None:
        self._slots = asyncio.Semaphore(self.serving.batch)

    async def serve(self, completion_tokens: int) -> bool:
        """Serve one request of ``completion_tokens``; False if the bounded queue is full
        (the caller answers 503), True once its answer is done."""
        bound = self.serving.queue
        if self._slots.locked() and bound is not None and self.waiting >= bound:
            return False
        self.waiting += 1
        self.max_waiting = max(self.max_waiting, self.waiting)
        try:
            await self._slots.acquire()
        finally:
            self.waiting -= 1
        self.in_service += 1
        self.max_in_service = max(self.max_in_service, self.in_service)
        try:
            await self._decode(completion_tokens)
        finally:
            self.in_service -= 1
            self._slots.release()
        self.served += 1
        self.completion_tokens += completion_tokens
        return True

    async def _decode(self, completion_tokens: int) -> None:
        serving = self.serving
        await asyncio.sleep(serving.base_s)
        left = completion_tokens
        while left > 0:
            steps = min(left, _STEPS_PER_LOOK)
            await asyncio.sleep(serving.latency_s(steps, self.in_service) - serving.base_s)
            left -= steps

    def stats(self) -> dict[str, float | int | None]:
        """The scheduler's counters and the server's unloaded latency and best throughput,
        both for the mean completion served so far (a benchmark's yardsticks)."""
        mean = self.completion_tokens / self.served if self.served else 0.0
        serving = self.serving
        return {
            "batch": serving.batch,
            "queue": serving.queue,
            "in_service": self.in_service,
            "waiting": self.waiting,
            "max_in_service": self.max_in_service,
            "max_waiting": self.max_waiting,
            "served": self.served,
            "mean_completion_tokens": round(mean, 2),
            "unloaded_latency_s": round(serving.latency_s(round(mean)), 4),
            "best_requests_per_s": round(serving.best_requests_per_s(mean), 3),
        }
