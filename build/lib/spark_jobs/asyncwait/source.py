"""Pulling from the operator's input one element at a time, sync or async alike.

A sync iterable is read inline (cheap, the common case in a Spark task). An async
iterable is read by one background task at a time, so the operator keeps emitting while
a slow source is producing, and never reads ahead of its capacity.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any

#: Returned by :meth:`Source.take` when no element is available right now.
NOTHING = object()


async def _next(iterator: AsyncIterator[Any]) -> Any:
    return await iterator.__anext__()


class Source:
    def __init__(self, source: Iterable[Any] | AsyncIterable[Any]) -> None:
        self._sync: Iterator[Any] | None = None
        self._async: AsyncIterator[Any] | None = None
        if isinstance(source, AsyncIterable):
            self._async = aiter(source)
        elif isinstance(source, Iterable):
            self._sync = iter(source)
        else:
            raise TypeError(f"source must be an iterable or async iterable, got {type(source)!r}")
        self.exhausted = False
        self.pull: asyncio.Task[Any] | None = None

    def take(self) -> Any:
        """The next element, or :data:`NOTHING` when exhausted or still being fetched."""
        if self._sync is not None:
            try:
                return next(self._sync)
            except StopIteration:
                self.exhausted = True
                return NOTHING
        assert self._async is not None
        if self.pull is None:
            self.pull = asyncio.get_running_loop().create_task(_next(self._async))
            return NOTHING
        if not self.pull.done():
            return NOTHING
        pull, self.pull = self.pull, None
        try:
            return pull.result()
        except StopAsyncIteration:
            self.exhausted = True
            return NOTHING

    async def close(self) -> None:
        """Stop a fetch in flight; errors of the source itself have already surfaced."""
        if self.pull is not None and not self.pull.done():
            self.pull.cancel()
            await asyncio.gather(self.pull, return_exceptions=True)
        self.pull = None
