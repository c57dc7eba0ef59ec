"""Pausing a record's timeout while its call waits for a resource other records hold.

The operator's ``timeout`` is a record's budget for being *worked on*: its attempts and
the backoff between them. A call that first has to wait for a concurrency slot or a rate
token is not being worked on: the wait depends on other records (a stalled connection, a
throttled burst), and charging it to this record would turn one slow upstream answer into
many healthy records timing out. The function marks such waits with ``untimed()``; the
operator's per-record timer stops inside and resumes, with what was left, afterwards.

Implemented on the record task's own ``asyncio.Timeout`` (kept in a context variable,
which asyncio copies per task), so the pause costs nothing when the call need not wait.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar

_RECORD_TIMER: ContextVar[asyncio.Timeout | None] = ContextVar("record_timer", default=None)


def set_record_timer(timer: asyncio.Timeout | None) -> None:
    """The operator's side: ``timer`` bounds the current task's record from now on."""
    _RECORD_TIMER.set(timer)


class untimed:  # lower case: it reads like a function, ``async with untimed():``
    """Time spent inside does not count against the calling record's ``timeout``.

    Use it around waits for shared capacity, never around the request itself. Outside
    an operator with a timeout (or when the timer has already fired) it does nothing.
    A class rather than an ``@asynccontextmanager``: most records of a busy partition
    wait for a slot, and a generator per wait was a measurable share of their cost.
    """

    __slots__ = ("_left", "_timer")

    async def __aenter__(self) -> None:
        timer = _RECORD_TIMER.get()
        self._timer = None
        if timer is None or timer.expired():
            return
        deadline = timer.when()
        if deadline is None:
            return
        self._timer = timer
        self._left = deadline - asyncio.get_running_loop().time()
        timer.reschedule(None)

    async def __aexit__(self, *exc_info: object) -> None:
        timer = self._timer
        if timer is not None:
            timer.reschedule(asyncio.get_running_loop().time() + self._left)
