"""The request budget's stop: records whose call met the spent budget wait for the next run.

Such a record was never called (the budget refused the request), so it is neither a
failure nor a dead letter: its outcome is held back and it goes into the last snapshot as
a record to call again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from spark_jobs.asyncwait import Failure, Result
from spark_jobs.enrichers import BudgetExhausted

T = TypeVar("T")


class BudgetStop:
    """Notes the records that met the spent budget and holds their outcomes."""

    def __init__(self) -> None:
        self._met: set[int] = set()
        self.held: list[Failure] = []

    @property
    def spent(self) -> bool:
        """Whether some call met the spent budget: the run admits no more input."""
        return bool(self._met)

    def guard(self, call: Callable[[int], Awaitable[T]]) -> Callable[[int], Awaitable[T]]:
        """``call`` for the operator, noting the records whose call the budget refused."""

        async def guarded(index: int) -> T:
            try:
                return await call(index)
            except BudgetExhausted:
                self._met.add(index)
                raise

        return guarded

    def hold(self, output: Result | Failure) -> bool:
        """Keep the outcome of a record that met the budget; False for any other."""
        if isinstance(output, Failure) and output.record in self._met:
            self.held.append(output)
            return True
        return False

    def requeued(self) -> list[dict[str, Any]]:
        """The held records as snapshot entries. The call that met the budget was never
        sent: it does not count as an attempt."""
        return [{"record": h.record, "attempts": h.attempts - 1} for h in self.held]
