"""A deferrable model run in batch mode: submit, wait in the triggerer, resume.

With ``model_mode="batch"`` and ``deferrable=True`` the operator runs the job with
``--detach-batches``: the job submits every record's batch, commits its snapshots and
exits with status 8 (``ExitStatus.BATCHES_RUNNING``), its summary saying
``batches_running``. The try then defers on :class:`BatchWaitTrigger` (no worker slot,
no Spark executors while the provider works) and, once every batch ended, its
``resume_after_batches`` runs the job again: the records re-attach to their batches,
read the rows and the run publishes, exactly once. A batch that expired leaves requests
that go into a new batch: that run detaches again, and the task defers again.

A try that times out (``execution_timeout``) or fails while deferred leaves the batches
running at the provider; the next try's job finds them in the journal and re-attaches.

The trigger needs the model's ``api`` (which batch API, how to read it): it is read from
the ``--model`` JSON in ``job_args``. A model section given otherwise (``--spec``) runs
as a blocking batch run, and the log says why.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from enrichment_airflow.batch_wait_trigger import BatchWaitTrigger
from enrichment_airflow.enrichment_hook import EnrichmentApiHook
from spark_jobs.defaults import ANTHROPIC_VERSION
from spark_jobs.records.batch_state import batches_url
from spark_jobs.snapshots import NamespaceKey

#: The job's flag for it.
DETACH_FLAG = "--detach-batches"
#: The operator method the trigger resumes.
RESUME_METHOD = "resume_after_batches"
#: Seconds between two polls of the batches, unless the model sets ``batch_poll_s``.
POLL_S = 30.0


@dataclass(frozen=True)
class BatchDeferral:
    """What the trigger of one operator's batch run needs, bar the secrets."""

    api: str
    """The model's ``api``: ``chat``, ``embeddings`` or ``anthropic``."""
    headers: dict[str, str]
    poll_s: float

    @classmethod
    def of(cls, op: Any) -> BatchDeferral | None:
        """The deferral of ``op`` (a rendered ``ResumableEnrichmentOperator``), or None
        when it runs blocking: not deferrable, not in batch mode, or no ``--model``."""
        if not (op.deferrable and op.model_mode == "batch"):
            return None
        args = list(op.job_args)
        if "--model" not in args[:-1]:
            return None
        try:
            model = json.loads(args[args.index("--model") + 1])
        except ValueError:  # the job refuses it, naming the option
            return None
        if not isinstance(model, dict):
            return None
        api = str(model.get("api", "chat"))
        headers = {}
        if api == "anthropic":
            headers["anthropic-version"] = str(model.get("anthropic_version", ANTHROPIC_VERSION))
        return cls(api, headers, float(model.get("batch_poll_s", POLL_S)))

    def trigger(self, op: Any, api: EnrichmentApiHook, key: NamespaceKey) -> BatchWaitTrigger:
        return BatchWaitTrigger(  # its hook resolves the secrets as the job's route does
            api_conn_id=op.api_conn_id,
            bearer_token=op.bearer_token,
            secret_headers=op.secret_headers,
            headers=self.headers,
            batches_url=batches_url(api.url_template(op.url_path), self.api),
            api=self.api,
            snapshot_root=api.snapshot_root,
            namespace=[key.dag_id, key.task_id, key.interval_start],
            poll_interval_s=self.poll_s,
        )


def detach_flags(op: Any) -> list[str]:
    """The job flags of ``op``'s run: ``--detach-batches`` when it defers, else none."""
    if BatchDeferral.of(op) is not None:
        return [DETACH_FLAG]
    if op.deferrable and op.model_mode == "batch":
        op.log.warning(
            "deferrable batch run: the model section is not in job_args (--model JSON): "
            "the task waits for its batches in its worker"
        )
    return []


def defer_while_batches_run(
    op: Any, api: EnrichmentApiHook, key: NamespaceKey, run_id: str
) -> None:
    """Defer ``op`` when run ``run_id`` stopped for its provider batches (its published
    summary says so); return otherwise."""
    deferral = BatchDeferral.of(op)
    if deferral is None:
        return
    try:
        summary = api.read_summary(op.summary_location(key))
    except (OSError, ValueError):
        return
    stop = summary.budget
    if summary.run_id != run_id or stop is None or not stop.batches_running:
        return
    op.log.info("%s: deferring until they end", stop.describe(summary.records_in))
    op.defer(trigger=deferral.trigger(op, api, key), method_name=RESUME_METHOD)
