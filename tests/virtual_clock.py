"""An event loop whose clock moves only while it would otherwise sleep.

Tests of timeouts against the wall clock pass or fail with the machine's load: a record
that answers at once still misses a 0.2 s deadline when the loop is starved for 0.2 s.
On this loop, time stands still while callbacks run and jumps to the next timer when
none is ready, so a deadline fires exactly when the code under test has waited that long
and never because the machine was busy. Real I/O still wakes the loop (its selector is
polled first); the loop sleeps for real only when it has neither timers nor ready I/O.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class VirtualClockLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        super().__init__()
        self._now = 0.0
        polled = self._selector.select

        def select(timeout: float | None = None) -> list[Any]:
            ready = polled(0)
            if ready or timeout is None:
                return ready or polled(None)
            self._now += timeout  # the wait a real loop would have slept through
            return []

        self._selector.select = select  # type: ignore[method-assign]

    def time(self) -> float:
        return self._now


def run_on_virtual_clock(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on a :class:`VirtualClockLoop`."""
    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        return runner.run(coro)
