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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar

_RECORD_TIMER: ContextVar[asyncio.Timeout | None] = ContextVar("record_timer", default=None)


def set_record_timer(timer: asyncio.Timeout | None) -> None:
    """The operator's side: ``timer`` bounds the current task's record from now on."""
    _RECORD_TIMER.set(timer)


@asynccontextmanager
async def untimed() -> AsyncIterator[None]:
    """Time spent inside does not count against the calling record's ``timeout``.

    Use it around waits for shared capacity, never around the request itself. Outside
    an operator with a timeout (or when the timer has already fired) it does nothing.
    """
    timer = _RECORD_TIMER.get()
    deadline = timer.when() if timer is not None and not timer.expired() else None
    if timer is None or deadline is None:
        yield
        return
    loop = asyncio.get_running_loop()
    left = deadline - loop.time()
    timer.reschedule(None)
    try:
        yield
    finally:
        timer.reschedule(loop.time() + left)
