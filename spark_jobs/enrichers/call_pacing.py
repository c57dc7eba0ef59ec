"""A limit beyond the request rate, kept by the HTTP sender around each call it sends.

A model endpoint limits tokens per minute and bills by token; a call's tokens are known
only from its answer. So the sender lets a :class:`CallPacing` admit each call before it
takes its rate slot (reserving an estimate, waiting for room) and settle it with the
reply. The implementation is ``model_endpoint/pacing.py``; other APIs have none.
"""

from __future__ import annotations

from typing import Any, Protocol

from .attempt import Reply
from .rate_control import RateController


class CallPacing(Protocol):
    async def admit(self, body: str | None) -> Any:
        """Reserve what the call with ``body`` may use; may wait, or raise
        ``BudgetExhausted`` (the call is then not sent)."""

    def settle(self, admitted: Any, reply: Reply | None, rate: RateController) -> None:
        """The call's ``reply`` (None: it got no answer) settles what ``admit`` reserved;
        its headers may steer ``rate``."""
