"""A record's timeout that pauses while its call waits for a resource other records hold.

The operator's ``timeout`` is a record's budget for being *worked on*: its attempts and
the backoff between them. A call that first has to wait for a concurrency slot or a rate
token is not being worked on: the wait depends on other records (a stalled connection, a
throttled burst), and charging it to this record would turn one slow upstream answer into
many healthy records timing out. The function marks such waits with ``untimed()``; the
record's :class:`RecordTimer` stops inside and goes on, with what was left, afterwards.

Most records of a busy partition wait for a slot once, so a pause must cost next to
nothing: it lifts the :class:`Deadline` and the resume sets it later than filed, which
touches no timer.

A task that calls for many records at once (a batch request, ``enrichers/batching.py``)
runs in the context of whichever record happened to start it, while the batch's records
wait on it from tasks of their own: ``work_for`` makes its ``untimed()`` waits pause the
timers of all of them (``calling_timer``, taken as each joined), not that one record's.
Likewise a record that waits for another record's identical call (``enrichers/dedup.py``)
pauses whenever that record does: ``pause_with``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from contextvars import ContextVar
from types import TracebackType
from typing import Protocol

from .deadline import Deadline


class Pausable(Protocol):
    """What ``untimed()`` pauses: a record's timer, or the timers of a batch's records."""

    def pause(self) -> bool: ...

    def resume(self) -> None: ...


_RECORD_TIMER: ContextVar[Pausable | None] = ContextVar("record_timer", default=None)


class RecordTimer(Deadline):
    """``async with RecordTimer(seconds):`` raises TimeoutError once the block has run
    ``seconds`` outside ``untimed()``."""

    __slots__ = ("_followers", "_held", "_left", "_seconds")

    def __init__(self, seconds: float) -> None:
        super().__init__(None)
        self._seconds = seconds
        self._left: float | None = None  # what was left when paused; None: not paused
        self._followers: list[Pausable] | None = None  # records waiting on this one's call
        self._held: list[Pausable] | None = None  # the followers its pause paused

    async def __aenter__(self) -> RecordTimer:
        self.when = asyncio.get_running_loop().time() + self._seconds
        await super().__aenter__()
        _RECORD_TIMER.set(self)  # the task's own context: its untimed() waits find it
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        _RECORD_TIMER.set(None)
        await super().__aexit__(exc_type, exc, traceback)

    def pause(self) -> bool:
        """Stop counting; False (and nothing done) if stopped or expired already."""
        if self.expired() or self._left is not None or self.when is None:
            return False
        self._left = self.when - asyncio.get_running_loop().time()
        self.move(None)
        if self._followers:
            self._held = [follower for follower in self._followers if follower.pause()]
        return True

    def resume(self) -> None:
        """Count again, with what was left when paused."""
        assert self._left is not None
        left, self._left = self._left, None
        self.move(asyncio.get_running_loop().time() + left)
        held, self._held = self._held, None
        if held:
            for follower in held:
                follower.resume()

    def lead(self, follower: Pausable) -> None:
        """``follower`` pauses while this timer is paused, from now on (at once if it is)."""
        if self._followers is None:
            self._followers = []
        self._followers.append(follower)
        if self._left is not None and follower.pause():
            self._held = [*(self._held or ()), follower]


class SharedTimers:
    """The timers of the records one task works for at once: paused and resumed
    together. Each pauses only if it runs (a record that timed out or is paused already
    stays as it is), and only those are resumed."""

    __slots__ = ("_paused", "_timers")

    def __init__(self, timers: Iterable[Pausable]) -> None:
        self._timers = tuple(timers)
        self._paused: list[Pausable] = []

    def pause(self) -> bool:
        """Stop every running timer; False (and nothing done) if none was running."""
        paused = [timer for timer in self._timers if timer.pause()]
        if not paused:
            return False
        self._paused = paused
        return True

    def resume(self) -> None:
        paused, self._paused = self._paused, []
        for timer in paused:
            timer.resume()


def calling_timer() -> Pausable | None:
    """The timer of the record this task calls for (None outside an operator's timeout):
    what a batch takes as the record joins it, for :func:`work_for`."""
    return _RECORD_TIMER.get()


def work_for(timers: Iterable[Pausable]) -> None:
    """From now on this task works for the records of ``timers``: its ``untimed()``
    waits pause theirs, not the timer of the record whose context the task was created
    in (a batch waiting for a rate slot is each of its records waiting for one). Call it
    in a task of its own: it sets the task's context."""
    _RECORD_TIMER.set(SharedTimers(timers))


def pause_with(leader: Pausable | None) -> None:
    """This task's record waits for ``leader``'s call (taken with :func:`calling_timer`
    by that record's task): its timer pauses whenever the leader's does, as its own call's
    wait for a slot would have paused it."""
    follower = _RECORD_TIMER.get()
    if isinstance(leader, RecordTimer) and follower is not None:
        leader.lead(follower)


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
