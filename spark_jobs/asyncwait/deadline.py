"""A deadline for a block of code that is cheap to set, move and lift, for the hot path.

``asyncio.timeout`` gives every block a timer handle of its own and re-arms it on every
``reschedule``: the old handle is cancelled and a new one allocated. Per record that was
a measurable share of the cost: every record has a timeout, every HTTP attempt has its
deadlines, a record's timeout pauses while it waits for a slot, and an attempt's stall
deadline moves with every chunk. Yet records take milliseconds and deadlines are seconds
away, so almost every deadline is set, moved later and lifted without ever being reached.

So deadlines share timer handles, like a timing wheel (Netty's ``HashedWheelTimer``,
Kafka's purgatory): the loop's clock is cut into ticks of :data:`TICK_S`, each deadline
is filed under the tick it falls in, and one handle per tick fires them all. Setting or
lifting one is a dict operation; moving one later only writes the new moment down, and
the tick re-files it when it fires; moving one sooner re-files it at once. A deadline
fires at most one tick late, never early.
"""

from __future__ import annotations

import asyncio
import weakref
from types import TracebackType

#: The wheel's resolution: a deadline fires within this many seconds after its moment.
TICK_S = 0.01


def _tick_of(when: float) -> int:
    """The first tick at or after ``when``: a deadline never fires before its moment."""
    return -int(-when // TICK_S)


class _Wheel:
    """One event loop's deadlines by tick, with one timer handle per tick in use."""

    __slots__ = ("__weakref__", "_filed", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._filed: dict[int, dict[Deadline, None]] = {}

    def file(self, deadline: Deadline, tick: int) -> None:
        filed = self._filed.get(tick)
        if filed is None:
            filed = self._filed[tick] = {}
            self._loop.call_at(tick * TICK_S, self._fire, tick)
        filed[deadline] = None

    def withdraw(self, deadline: Deadline, tick: int) -> None:
        filed = self._filed.get(tick)
        if filed is not None:
            filed.pop(deadline, None)

    def _fire(self, tick: int) -> None:
        for deadline in self._filed.pop(tick, ()):
            deadline._on_tick(tick)


_WHEELS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Wheel] = weakref.WeakKeyDictionary()


def _wheel(loop: asyncio.AbstractEventLoop) -> _Wheel:
    wheel = _WHEELS.get(loop)
    if wheel is None:
        wheel = _WHEELS[loop] = _Wheel(loop)
    return wheel


class Deadline:
    """``async with Deadline(when):`` raises TimeoutError when the loop's clock reaches
    ``when`` (None: no deadline) inside the block, as ``asyncio.timeout_at`` does: the
    task is cancelled and the cancellation becomes TimeoutError at the block's end."""

    __slots__ = ("_cancelling", "_expired", "_task", "_tick", "_wheel", "when")

    def __init__(self, when: float | None) -> None:
        self.when = when
        self._expired = False
        self._tick: int | None = None  # the tick it is filed under; None: not filed
        self._wheel: _Wheel | None = None  # set on entry

    def expired(self) -> bool:
        """True once the deadline cancelled the block."""
        return self._expired

    def move(self, when: float | None) -> None:
        """The deadline is ``when`` from now on (None: none)."""
        self.when = when
        if self._expired or when is None or self._wheel is None:
            return  # nothing to file: expired, no deadline, or not entered yet
        tick = _tick_of(when)
        if self._tick is None or tick < self._tick:
            self._file(tick)
        # later than filed: its tick re-files it when it fires

    async def __aenter__(self) -> Deadline:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("Deadline must be used inside a task")
        self._task = task
        self._wheel = _wheel(task.get_loop())
        self._cancelling = task.cancelling()
        if self.when is not None:
            self._file(_tick_of(self.when))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._tick is not None:
            assert self._wheel is not None
            self._wheel.withdraw(self, self._tick)
            self._tick = None
        self._wheel = None  # a move after the block arms nothing
        if self._expired and self._task.uncancel() <= self._cancelling:
            if exc_type is not None and issubclass(exc_type, asyncio.CancelledError):
                raise TimeoutError from exc

    def _file(self, tick: int) -> None:
        wheel = self._wheel
        assert wheel is not None
        if self._tick is not None:
            wheel.withdraw(self, self._tick)
        self._tick = tick
        wheel.file(self, tick)

    def _on_tick(self, tick: int) -> None:
        """The tick it was filed under has come."""
        self._tick = None
        when = self.when
        if when is None:
            return  # no deadline any more; move() files it again if one is set
        later = _tick_of(when)
        if later > tick:  # moved later since it was filed
            self._file(later)
            return
        self._expired = True
        self._task.cancel()
