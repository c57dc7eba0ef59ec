"""Gathering single lookups into batch requests, and handing each caller its own answer.

Many APIs answer up to N ids per request far more cheaply than N requests. The operator
still calls the enricher once per record; :class:`Batcher` parks each call until
``size`` distinct keys are waiting or ``max_wait`` has passed since the first of them,
sends them in one call, then resolves every caller with the outcome for its own key
(a value, or an exception for that key alone). A failed batch call fails every caller
of that batch, and the operator retries each record on its own; retries simply join a
later batch.

The call runs in a task of its own, for all its callers: its waits for a slot or a rate
token (``untimed``) pause every caller's record timer, as a record's own call would,
not only the timer of the caller whose context the task was created in. Else a batch
queued behind the rate limit for longer than ``--timeout`` timed out all its records
but one, each a dead letter that a later batch would have answered.

Some APIs also bound what a request carries (an embeddings request: 300 000 tokens
summed over its inputs): with ``weight`` and ``max_weight`` a key that would carry the
waiting batch past ``max_weight`` sends that batch first and starts the next one. A key
heavier than ``max_weight`` on its own goes alone, for the API to answer or refuse.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Generic, TypeVar

from spark_jobs.asyncwait import calling_timer, work_for
from spark_jobs.asyncwait.record_timer import Pausable

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

#: Sends one batch: distinct keys in arrival order -> each key's value or exception.
SendBatch = Callable[[list[K]], Awaitable[Mapping[K, V | BaseException]]]


class BatchAnswerMissing(LookupError):
    """The batch call returned no outcome for a key (a bug in the send function)."""


class Batcher(Generic[K, V]):
    """Coalesces ``submit(key)`` calls into ``send(keys)`` calls of at most ``size`` keys."""

    def __init__(
        self,
        send: SendBatch[K, V],
        size: int,
        max_wait: float,
        weight: Callable[[K], int] | None = None,
        max_weight: int | None = None,
    ) -> None:
        """``weight(key)``: what a key adds to its batch, which carries at most
        ``max_weight`` (both or neither)."""
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size!r}")
        if max_wait <= 0:
            raise ValueError(f"max_wait must be > 0, got {max_wait!r}")
        if (weight is None) != (max_weight is None) or (max_weight is not None and max_weight < 1):
            raise ValueError(f"give weight and a max_weight >= 1 together, got {max_weight!r}")
        self._send = send
        self.size = size
        self.max_wait = max_wait
        self._weight = weight
        self.max_weight = max_weight
        self._pending: dict[K, list[asyncio.Future[V]]] = {}
        self._pending_weight = 0
        self._record_timers: list[Pausable] = []  # the waiting batch's callers'
        self._timer: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task[None]] = set()

    async def submit(self, key: K) -> V:
        """The outcome for ``key`` once its batch has been answered."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[V] = loop.create_future()
        waiters = self._pending.get(key)
        if waiters is None:
            self._add(key, future)
            full = self.max_weight is not None and self._pending_weight >= self.max_weight
            if full or len(self._pending) >= self.size:
                self._flush()
            elif self._timer is None:
                self._timer = loop.call_later(self.max_wait, self._flush)
        else:
            waiters.append(future)  # the same key twice in one batch: asked once
            self._join_timer()
        return await future

    def _join_timer(self) -> None:
        """The caller's record timer goes with the waiting batch (``work_for``)."""
        timer = calling_timer()
        if timer is not None:
            self._record_timers.append(timer)

    def _add(self, key: K, future: asyncio.Future[V]) -> None:
        """A new key joins the waiting batch, which is sent first if the key's weight
        would carry it past ``max_weight``."""
        if self._weight is not None and self.max_weight is not None:
            weight = self._weight(key)
            if self._pending and self._pending_weight + weight > self.max_weight:
                self._flush()
            self._pending_weight += weight
        self._pending[key] = [future]
        self._join_timer()

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._pending = self._pending, {}
        timers, self._record_timers = self._record_timers, []
        self._pending_weight = 0
        if batch:
            task = asyncio.get_running_loop().create_task(self._deliver(batch, timers))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _deliver(
        self, batch: dict[K, list[asyncio.Future[V]]], timers: list[Pausable]
    ) -> None:
        work_for(timers)  # its untimed waits are all its callers', in its own context
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
        self._record_timers = []
        self._pending_weight = 0
        tasks = list(self._sending)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
