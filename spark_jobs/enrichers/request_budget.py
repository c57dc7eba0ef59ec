"""The requests one partition may still send under the run's ``--max-requests`` (or the
micro units of currency under ``--max-cost``: a model call spends its reserved cost, and
:meth:`RequestBudget.settle` corrects it by its usage).

A local allowance, spent without I/O, and refilled when short by
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

    def __init__(
        self, allowance: int = 0, claim: Callable[[], int] | None = None, what: str = "request"
    ) -> None:
        if allowance < 0:
            raise ValueError(f"allowance must be >= 0, got {allowance!r}")
        self.left = allowance
        self.granted = allowance
        self._claim = claim
        self._spent = claim is None  # no more to claim
        self._refill: asyncio.Lock | None = None
        self._what = what

    async def spend(self, units: int = 1) -> None:
        """Take ``units`` (a request), claiming more while short (a wait that does not
        count against the record's timeout); :class:`BudgetExhausted` when the run's
        budget cannot cover them."""
        while self.left < units:
            before = self.left
            await self._claim_more(units)
            if self.left == before:
                raise BudgetExhausted(f"the run's {self._what} budget is spent")
        self.left -= units

    def settle(self, reserved: int, used: int) -> None:
        """A spend of ``reserved`` units turned out to cost ``used``: the difference goes
        back (or is owed, taken from the next claim)."""
        self.left += reserved - used

    async def _claim_more(self, units: int = 1) -> None:
        if self._refill is None:
            self._refill = asyncio.Lock()
        async with untimed(), self._refill:
            if self.left >= units or self._spent or self._claim is None:
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
