"""The requests one partition may still send under the run's ``--max-requests``.

A local allowance, spent one request at a time without I/O, and refilled when empty by
``claim``: a blocking function (the run's ledger, ``snapshots/budget_ledger.py``) that
grants more requests, 0 when the run's budget is spent. Without ``claim`` the allowance
is all there is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from spark_jobs.asyncwait import untimed

from .errors import BudgetExhausted


class RequestBudget:
    """What this partition may send; refills happen one at a time, off the event loop."""

    def __init__(self, allowance: int = 0, claim: Callable[[], int] | None = None) -> None:
        if allowance < 0:
            raise ValueError(f"allowance must be >= 0, got {allowance!r}")
        self.left = allowance
        self.granted = allowance
        self._claim = claim
        self._spent = claim is None  # no more to claim
        self._refill: asyncio.Lock | None = None

    async def spend(self) -> None:
        """Take one request, claiming more when none is left (a wait that does not count
        against the record's timeout); :class:`BudgetExhausted` when the run's is spent."""
        if self.left == 0:
            await self._claim_more()
            if self.left == 0:
                raise BudgetExhausted("the run's request budget is spent")
        self.left -= 1

    async def _claim_more(self) -> None:
        if self._refill is None:
            self._refill = asyncio.Lock()
        async with untimed(), self._refill:
            if self.left > 0 or self._spent or self._claim is None:
                return  # another call refilled it meanwhile, or there is no more
            granted = await asyncio.to_thread(self._claim)
            self._spent = granted == 0
            self.left += granted
            self.granted += granted

    def close(self) -> int:
        """Stop spending: what was granted and not spent, for giving back; no more is
        claimed after this."""
        left, self.left, self._spent = self.left, 0, True
        return left
