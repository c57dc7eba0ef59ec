"""The stop for a later run: records whose call met the spent budget, or whose provider
batch still runs when the run detaches from its batches (``--detach-batches``), wait for
the next run.

Such a record was never called (the budget refused the request), or its call has not
ended (its batch runs on at the provider), so it is neither a failure nor a dead letter:
its outcome is held back and it goes into the last snapshot as a record to call again
(the next run reads its batch's row instead of sending it again). The attempt's requests
come from the run's ledger (``snapshots/budget_ledger.py``) in chunks, claimed as it
needs them; a partition that ends gives back what it claimed and did not spend.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from spark_jobs.asyncwait import Failure, Result
from spark_jobs.enrichers import BatchRunning, BudgetExhausted, RequestBudget
from spark_jobs.snapshots import PartitionSnapshots
from spark_jobs.snapshots.budget_ledger import BudgetLedger, chunk_size
from spark_jobs.spec.job_spec import JobSpec
from spark_jobs.spec.model_options import cost_units

from .task import PartitionTask

T = TypeVar("T")


class BudgetStop:
    """Notes the records that met the spent budget, or whose batch runs on, and holds
    their outcomes."""

    def __init__(
        self, ledger: BudgetLedger | None = None, owner: str = "", what: str = "request"
    ) -> None:
        """``ledger``: the run's budget, claimed by ``owner`` (None: no budget), of
        requests or (``what="cost"``) micro units of the model's currency."""
        self._met: set[int] = set()
        self._waiting: set[int] = set()  # for their batches
        self.held: list[Failure] = []
        self._ledger = ledger
        self.allowance: RequestBudget | None = None
        if ledger is not None:
            self.allowance = RequestBudget(claim=lambda: ledger.claim(owner), what=what)

    @classmethod
    def of(cls, spec: JobSpec, snapshots: PartitionSnapshots, task: PartitionTask) -> BudgetStop:
        """The stop of one attempt, claiming from its run's ledger when ``max_requests``
        (or ``max_cost``) is set. The ledger sits in the namespace, the partition
        directory's parent."""
        if spec.max_cost is not None:
            total, what = cost_units(spec.max_cost), "cost"
        elif spec.max_requests is not None:
            total, what = spec.max_requests, "request"
        else:
            return cls()
        namespace = snapshots.path.rsplit("/", 1)[0]
        chunk = chunk_size(total, spec.running_partitions)
        ledger = BudgetLedger.at(spec.snapshot_dir, namespace, task.run_id, total, chunk)
        return cls(ledger, f"partition {task.partition} attempt {task.attempt}", what)

    def give_back(self) -> None:
        """After the partition's last call: offer the others what it did not spend.
        Blocking I/O."""
        if self._ledger is not None and self.allowance is not None:
            self._ledger.give_back(self.allowance.close())

    @property
    def spent(self) -> bool:
        """Whether some call met the spent budget: the run admits no more input."""
        return bool(self._met)

    @property
    def batches_running(self) -> bool:
        """Whether some record waits for a batch a later run reads."""
        return bool(self._waiting)

    def guard(self, call: Callable[[int], Awaitable[T]]) -> Callable[[int], Awaitable[T]]:
        """``call`` for the operator, noting the records whose call the budget refused."""

        async def guarded(index: int) -> T:
            try:
                return await call(index)
            except BudgetExhausted:
                self._met.add(index)
                raise
            except BatchRunning:
                self._waiting.add(index)
                raise

        return guarded

    def hold(self, output: Result | Failure) -> bool:
        """Keep the outcome of a record that waits for the next run; False for any other."""
        held = self._met, self._waiting
        if isinstance(output, Failure) and any(output.record in ids for ids in held):
            self.held.append(output)
            return True
        return False

    def requeued(self) -> list[dict[str, Any]]:
        """The held records as snapshot entries. The call that met the budget was never
        sent, and one whose batch runs on has not ended: neither counts as an attempt."""
        return [{"record": h.record, "attempts": h.attempts - 1} for h in self.held]
