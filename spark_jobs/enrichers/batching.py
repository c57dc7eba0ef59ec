"""Gathering single lookups into batch requests, and handing each caller its own answer.

Many APIs answer up to N ids per request far more cheaply than N requests. The operator
still calls the enricher once per record; :class:`Batcher` parks each call until
``size`` distinct keys are waiting or ``max_wait`` has passed since the first of them,
sends them in one call, then resolves every caller with the outcome for its own key
(a value, or an exception for that key alone). A failed batch call fails every caller
of that batch, and the operator retries each record on its own; retries simply join a
later batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

#: Sends one batch: distinct keys in arrival order -> each key's value or exception.
SendBatch = Callable[[list[K]], Awaitable[Mapping[K, V | BaseException]]]


class BatchAnswerMissing(LookupError):
    """The batch call returned no outcome for a key (a bug in the send function)."""


class Batcher(Generic[K, V]):
    """Coalesces ``submit(key)`` calls into ``send(keys)`` calls of at most ``size`` keys."""

    def __init__(self, send: SendBatch[K, V], size: int, max_wait: float) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size!r}")
        if max_wait <= 0:
            raise ValueError(f"max_wait must be > 0, got {max_wait!r}")
        self._send = send
        self.size = size
        self.max_wait = max_wait
        self._pending: dict[K, list[asyncio.Future[V]]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task[None]] = set()

    async def submit(self, key: K) -> V:
        """The outcome for ``key`` once its batch has been answered."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[V] = loop.create_future()
        waiters = self._pending.get(key)
        if waiters is None:
            self._pending[key] = [future]
            if len(self._pending) >= self.size:
                self._flush()
            elif self._timer is None:
                self._timer = loop.call_later(self.max_wait, self._flush)
        else:
            waiters.append(future)  # the same key twice in one batch: asked once
        return await future

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._pending = self._pending, {}
        if batch:
            task = asyncio.get_running_loop().create_task(self._deliver(batch))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _deliver(self, batch: dict[K, list[asyncio.Future[V]]]) -> None:
        try:
            outcomes = await self._send(list(batch))
        except asyncio.CancelledError:
            for waiters in batch.values():
                for waiter in waiters:
                    waiter.cancel()
            raise
        except Exception as error:  # every caller of this batch shares the failure
            for waiters in batch.values():
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_exception(error)
            return
        for key, waiters in batch.items():
            outcome = (
                outcomes[key]
                if key in outcomes
                else BatchAnswerMissing(f"the batch call returned nothing for {key!r}")
            )
            for waiter in waiters:
                if waiter.done():
                    continue  # its caller gave up (timeout): nothing to deliver
                if isinstance(outcome, BaseException):
                    waiter.set_exception(outcome)
                else:
                    waiter.set_result(outcome)

    async def aclose(self) -> None:
        """Cancel batches being sent and waiting; their callers see the cancellation."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for waiters in self._pending.values():
            for waiter in waiters:
                waiter.cancel()
        self._pending = {}
        tasks = list(self._sending)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
