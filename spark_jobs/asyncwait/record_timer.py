"""A record's timeout that pauses while its call waits for a resource other records hold.

The operator's ``timeout`` is a record's budget for being *worked on*: its attempts and
the backoff between them. A call that first has to wait for a concurrency slot or a rate
token is not being worked on: the wait depends on other records (a stalled connection, a
throttled burst), and charging it to this record would turn one slow upstream answer into
many healthy records timing out. The function marks such waits with ``untimed()``; the
record's :class:`RecordTimer` stops inside and goes on, with what was left, afterwards.

Why not ``asyncio.timeout`` with ``reschedule``: most records of a busy partition wait
for a slot once, and every reschedule frees one timer handle and allocates another (a
measurable share of a record's cost). A pause here only moves the deadline; the one
timer handle, armed on entry, notices the move when it fires (almost never: records take
milliseconds, timeouts seconds) and re-arms for what is left.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from types import TracebackType

_RECORD_TIMER: ContextVar[RecordTimer | None] = ContextVar("record_timer", default=None)


class RecordTimer:
    """``async with RecordTimer(seconds):`` raises TimeoutError when the block has run
    ``seconds`` outside ``untimed()``, as ``asyncio.timeout`` does (the task is cancelled
    and the cancellation becomes TimeoutError at the block's end)."""

    __slots__ = (
        "_armed_for",
        "_cancelling",
        "_deadline",
        "_expired",
        "_handle",
        "_loop",
        "_paused_at",
        "_seconds",
        "_task",
    )

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._expired = False
        self._paused_at: float | None = None
        self._handle: asyncio.TimerHandle | None = None

    def expired(self) -> bool:
        """True once the timer cancelled the block."""
        return self._expired

    async def __aenter__(self) -> RecordTimer:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("RecordTimer must be used inside a task")
        self._task, self._loop = task, asyncio.get_running_loop()
        self._cancelling = task.cancelling()
        self._deadline = self._loop.time() + self._seconds
        self._arm()
        _RECORD_TIMER.set(self)  # the task's own context: its untimed() waits find it
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        _RECORD_TIMER.set(None)
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._expired and self._task.uncancel() <= self._cancelling:
            if exc_type is not None and issubclass(exc_type, asyncio.CancelledError):
                raise TimeoutError from exc

    def pause(self) -> bool:
        """Stop counting; False (and nothing done) if stopped or expired already."""
        if self._expired or self._paused_at is not None:
            return False
        self._paused_at = self._loop.time()
        return True

    def resume(self) -> None:
        """Count again, with what was left when paused."""
        assert self._paused_at is not None
        self._deadline += self._loop.time() - self._paused_at
        self._paused_at = None
        if self._handle is None and not self._expired:  # it fired during the pause
            self._arm()

    def _arm(self) -> None:
        self._armed_for = self._deadline
        self._handle = self._loop.call_at(self._deadline, self._on_deadline)

    def _on_deadline(self) -> None:
        self._handle = None
        if self._paused_at is not None:
            return  # resume() re-arms with what is left
        if self._deadline > self._armed_for:  # pauses moved it since it was armed
            self._arm()
            return
        self._expired = True
        self._task.cancel()


class untimed:  # lower case: it reads like a function, ``async with untimed():``
    """Time spent inside does not count against the calling record's ``timeout``.

    Use it around waits for shared capacity, never around the request itself. Outside
    an operator with a timeout (or when the timer has already fired) it does nothing.
    A class rather than an ``@asynccontextmanager``: most records of a busy partition
    wait for a slot, and a generator per wait was a measurable share of their cost.
    """

    __slots__ = ("_timer",)

    async def __aenter__(self) -> None:
        timer = _RECORD_TIMER.get()
        self._timer = timer if timer is not None and timer.pause() else None

    async def __aexit__(self, *exc_info: object) -> None:
        if self._timer is not None:
            self._timer.resume()
