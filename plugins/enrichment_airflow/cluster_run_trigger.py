"""The trigger a deferred cluster-mode enrichment waits on, in Airflow's triggerer.

While the driver runs on the cluster, the task holds no worker slot: this trigger polls,
every ``poll_interval_s``, two small things and nothing else:

* the namespace's progress record (``progress.json``: one ranged GET, whatever the
  number of cuts so far; the completion record once the run published), and writes the
  line to the task log when it changed:
  ``progress: 48 213 / 100 000 committed, epoch 12, 64 in flight``;
* the driver's state, through a :class:`~enrichment_airflow.driver_status.DriverStatusClient`.

It fires once, when the driver has ended (``FINISHED`` is success; ``FAILED``, ``KILLED``,
``ERROR`` failure) or when the cluster manager gave no usable answer ``max_missed``
times in a row; the operator's ``execute_complete`` then reads the summary on a worker.
The event carries the enrichment run id of the driver, so ``execute_complete`` needs
nothing but the event: ``airflow dags test`` resumes a task with ``{"event": ...}``
alone, dropping the ``kwargs`` given to ``defer`` (the triggerer keeps them).

The Storage tab (the task state store) is not written from here: Airflow 3.3's
triggerer relays Variables, XComs, connections and asset state to a trigger, but no task
state store message, so the operator writes the line when it defers and when it
resumes; in between the line is in the log and on the snapshot page.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from enrichment_airflow.driver_status import DriverState, DriverStatusError, status_client
from enrichment_airflow.progress_reporter import progress_line
from spark_jobs.snapshots import NamespaceKey, SnapshotStore

logger = logging.getLogger(__name__)

#: Unusable answers in a row (master unreachable, driver unknown) before giving up, as
#: the provider's blocking tracking does.
MAX_MISSED = 10


class ClusterRunTrigger(BaseTrigger):
    """Wait for driver ``driver_id`` to end, reporting the namespace's progress.

    :param driver_id: the cluster manager's id of the driver (``driver-2026...``).
    :param run_id: the enrichment run id of that driver's run, echoed in the event.
    :param status: the :meth:`DriverStatusClient.to_spec` of the client to ask.
    :param snapshot_root: the snapshot root the job writes to (any fsspec URL).
    :param namespace: ``(dag_id, task_id, interval_start)`` of the run's namespace.
    :param poll_interval_s: seconds between two polls.
    :param max_missed: unusable status answers in a row before the trigger fails.
    """

    def __init__(
        self,
        *,
        driver_id: str,
        run_id: str,
        status: Mapping[str, Any],
        snapshot_root: str,
        namespace: Sequence[str],
        poll_interval_s: float,
        max_missed: int = MAX_MISSED,
    ) -> None:
        # BaseTrigger.__init__(**kwargs) has no annotations, and mypy does not apply
        # untyped_calls_exclude (pyproject) to a super() call.
        super().__init__()  # type: ignore[no-untyped-call]
        self.driver_id = driver_id
        self.run_id = run_id
        self.status = dict(status)
        self.snapshot_root = snapshot_root
        self.namespace = tuple(namespace)
        self.poll_interval_s = poll_interval_s
        self.max_missed = max_missed
        self._last_line: str | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "driver_id": self.driver_id,
                "run_id": self.run_id,
                "status": self.status,
                "snapshot_root": self.snapshot_root,
                "namespace": list(self.namespace),
                "poll_interval_s": self.poll_interval_s,
                "max_missed": self.max_missed,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        client = status_client(self.status)
        store = SnapshotStore(self.snapshot_root)
        key = NamespaceKey(*self.namespace)
        missed, last_state = 0, ""
        while True:
            try:
                state = await client.state(self.driver_id)
            except DriverStatusError as error:
                missed += 1
                self.log.warning("driver %s: %s (%d in a row)", self.driver_id, error, missed)
                if missed >= self.max_missed:
                    yield self._event("failed", "UNREACHABLE", str(error))
                    return
            else:
                missed = 0
                if state.name != last_state:
                    self.log.info("driver %s is %s", self.driver_id, state.name)
                    last_state = state.name
                await self._report(store, key)
                if not state.active:
                    yield self._ended(state)
                    return
            await asyncio.sleep(self.poll_interval_s)

    async def _report(self, store: SnapshotStore, key: NamespaceKey) -> None:
        """Log the progress line when it changed; progress is a courtesy and never fails
        the wait. The read is blocking fsspec I/O: off the triggerer's event loop."""
        try:
            line = await asyncio.to_thread(progress_line, store, key)
        except Exception:
            self.log.warning("could not read enrichment progress", exc_info=True)
            return
        if line is not None and line != self._last_line:
            self.log.info("progress: %s", line)
            self._last_line = line

    def _ended(self, state: DriverState) -> TriggerEvent:
        if state.succeeded:
            return self._event("success", state.name, f"driver {self.driver_id} finished")
        return self._event("failed", state.name, f"driver {self.driver_id} ended {state.name}")

    def _event(self, status: str, driver_state: str, message: str) -> TriggerEvent:
        return TriggerEvent(
            {
                "status": status,
                "driver_id": self.driver_id,
                "run_id": self.run_id,
                "driver_state": driver_state,
                "message": message,
            }
        )
