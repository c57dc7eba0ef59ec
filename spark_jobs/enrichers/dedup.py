"""Not asking the same question twice: in-flight coalescing and a bounded LRU cache.

Enrichment inputs repeat keys (many orders of one customer), and each call costs
latency, rate budget and often money. Requests are keyed by what is sent (method, URL,
body), so two records that produce the same request share one answer however they
differ otherwise.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, TypeVar

from spark_jobs.asyncwait import calling_timer, pause_with
from spark_jobs.asyncwait.record_timer import Pausable

from .errors import RetryableError

T = TypeVar("T")


class LruCache(Generic[T]):
    """At most ``size`` entries; the least recently used goes first. ``size=0`` keeps none."""

    def __init__(self, size: int) -> None:
        if size < 0:
            raise ValueError(f"size must be >= 0, got {size!r}")
        self.size = size
        self._entries: OrderedDict[Hashable, T] = OrderedDict()

    def get(self, key: Hashable) -> T | None:
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def put(self, key: Hashable, value: T) -> None:
        if not self.size:
            return
        self._entries[key] = value
        self._entries.move_to_end(key)
        if len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


class Coalescer(Generic[T]):
    """Runs one call per key at a time; callers arriving meanwhile await its outcome.

    The first caller (the leader) runs the call in its own task, which keeps the common
    case free of an extra task per request; the future the followers wait on is only
    created when the first follower arrives, since most keys never get one. Should the
    leader be cancelled (its record timed out), the followers get a
    :class:`RetryableError` rather than a cancellation that is not theirs; the operator
    then retries them. A follower's timeout pauses while the leader's does (its call
    waiting for a slot: ``asyncwait.pause_with``), so a wait no record works through
    never times a follower out.
    """

    def __init__(self) -> None:
        # key -> the leader's record timer (or None) while it runs alone, then the future
        # its followers wait on, the leader's timer kept in _leaders meanwhile.
        self._in_flight: dict[Hashable, asyncio.Future[T] | Pausable | None] = {}
        self._leaders: dict[Hashable, Pausable | None] = {}
        self.saved_calls = 0

    async def run(self, key: Hashable, call: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``await call(*args)``, or the outcome of the call already running for ``key``."""
        in_flight = self._in_flight
        if key in in_flight:
            return await self._follow(key)
        in_flight[key] = calling_timer()
        try:
            value = await call(*args)
        except asyncio.CancelledError:
            shared = self._end(key)
            if shared is not None:
                shared.set_exception(RetryableError("the shared call was cancelled by its caller"))
            raise
        except BaseException as error:
            shared = self._end(key)
            if shared is not None:
                shared.set_exception(error)
            raise
        shared = self._end(key)
        if shared is not None:
            shared.set_result(value)
        return value

    async def _follow(self, key: Hashable) -> T:
        shared = self._in_flight[key]
        if not isinstance(shared, asyncio.Future):  # the first follower
            self._leaders[key] = shared
            shared = self._in_flight[key] = asyncio.get_running_loop().create_future()
        pause_with(self._leaders[key])
        self.saved_calls += 1
        return await asyncio.shield(shared)

    def _end(self, key: Hashable) -> asyncio.Future[T] | None:
        """The leader is done: the future its followers wait on, if any came."""
        shared = self._in_flight.pop(key)
        if isinstance(shared, asyncio.Future):
            del self._leaders[key]
            return shared
        return None

    def __len__(self) -> int:
        return len(self._in_flight)
