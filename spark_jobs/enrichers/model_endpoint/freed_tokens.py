"""Calls waiting for tokens wake when some are freed, not only when their wait runs out.

A call that waits on a token bucket or a fixed window (``pacing.py``,
``fixed_window.py``) computes how long until there is room for it. An answer that used
fewer tokens than it reserved, or a credit granted meanwhile, frees room sooner; the
waiting calls are told, and each computes its wait again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class FreedTokens:
    """The signal from settlements to the calls waiting for room."""

    def __init__(self) -> None:
        self._event: asyncio.Event | None = None  # made in the loop that first waits

    def notify(self) -> None:
        """Some tokens were freed: every waiting call looks again."""
        if self._event is not None:
            self._event.set()

    async def wait(self, seconds_until_room: Callable[[], float]) -> None:
        """Return once ``seconds_until_room()`` is 0, asking again on each notice."""
        while (wait := seconds_until_room()) > 0:
            if self._event is None:
                self._event = asyncio.Event()
            self._event.clear()
            try:
                await asyncio.wait_for(self._event.wait(), wait)
            except TimeoutError:
                pass
