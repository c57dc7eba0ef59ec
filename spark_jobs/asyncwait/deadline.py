"""A deadline for a block of code that is cheap to move later, for the hot path.

``asyncio.timeout`` re-arms its timer on every ``reschedule``: the old timer handle is
cancelled and a new one allocated. Per record that was a measurable share of the cost:
a record's timeout pauses while it waits for a slot, and an HTTP attempt's stall
deadline moves with every chunk. Records take milliseconds, deadlines are seconds away,
so almost every deadline is moved later and then never reached. :class:`Deadline` keeps
one handle armed for the soonest moment it could fire; moving the deadline later only
writes down the new moment, which the handle checks when it fires (and then re-arms for
it). Moving it sooner re-arms at once.
"""

from __future__ import annotations

import asyncio
from types import TracebackType


class Deadline:
    """``async with Deadline(when):`` raises TimeoutError when the loop's clock reaches
    ``when`` (None: no deadline) inside the block, as ``asyncio.timeout_at`` does: the
    task is cancelled and the cancellation becomes TimeoutError at the block's end."""

    __slots__ = ("_armed_for", "_cancelling", "_expired", "_handle", "_loop", "_task", "when")

    def __init__(self, when: float | None) -> None:
        self.when = when
        self._expired = False
        self._handle: asyncio.TimerHandle | None = None
        self._armed_for: float | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # set on entry

    def expired(self) -> bool:
        """True once the deadline cancelled the block."""
        return self._expired

    def move(self, when: float | None) -> None:
        """The deadline is ``when`` from now on (None: none)."""
        self.when = when
        if self._expired or when is None or self._loop is None:
            return  # nothing to arm: expired, no deadline, or not entered yet
        if self._armed_for is None or when < self._armed_for:
            self._arm(when)
        # later than armed: the armed handle re-arms for it when it fires

    async def __aenter__(self) -> Deadline:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("Deadline must be used inside a task")
        self._task, self._loop = task, asyncio.get_running_loop()
        self._cancelling = task.cancelling()
        if self.when is not None:
            self._arm(self.when)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._expired and self._task.uncancel() <= self._cancelling:
            if exc_type is not None and issubclass(exc_type, asyncio.CancelledError):
                raise TimeoutError from exc

    def _arm(self, when: float) -> None:
        assert self._loop is not None
        if self._handle is not None:
            self._handle.cancel()
        self._armed_for = when
        self._handle = self._loop.call_at(when, self._on_deadline)

    def _on_deadline(self) -> None:
        armed_for, self._handle, self._armed_for = self._armed_for, None, None
        when = self.when
        if when is None:
            return  # no deadline any more; move() arms again if one is set
        assert armed_for is not None
        if when > armed_for:  # moved later since it was armed
            self._arm(when)
            return
        self._expired = True
        self._task.cancel()
