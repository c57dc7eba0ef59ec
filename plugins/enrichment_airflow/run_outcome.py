"""How an enrichment try ends in Airflow, whether it waited in its worker or deferred.

The blocking path (``ResumableEnrichmentOperator.execute``) and the deferred one
(``execute_complete``, after the trigger fired) end the same way: a finished run returns
its summary (the XCom) and puts its counts and combined watermark on the Asset events of
the outlets; a failed run says why and what the next try will do.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowException

from enrichment_airflow.batch_deferral import defer_while_batches_run
from enrichment_airflow.enrichment_hook import EnrichmentApiHook
from enrichment_airflow.namespace import namespace_key
from enrichment_airflow.task_metrics import emit_task_metrics
from spark_jobs.snapshots import NamespaceKey

#: Summary counts put on the outlets' Asset events.
ASSET_EVENT_KEYS = (
    "records_in",
    "enriched",
    "dead_letters",
    "requests_made",
    "replayed_from_snapshot",
    "resumed",
    "watermark",
    "cost",
)


# ``op`` is a ResumableEnrichmentOperator after templating (``output_path``, ``outlets``,
# ``log``); typed as Any to keep this module below the operator in the import graph.
def finish_run(op: Any, context: Context, api: EnrichmentApiHook) -> dict[str, Any]:
    """The published summary (its stored form is the XCom), logged and put on the
    outlets' Asset events."""
    summary = api.read_summary(op.summary_location(namespace_key(context)))
    document = summary.to_json()
    op.log.info("enrichment summary: %s", json.dumps(document, sort_keys=True))
    op.summary, op.api_url = summary, api.url_template(op.url_path)  # for lineage
    emit_task_metrics(summary, op.dag_id, op.task_id)
    extra = {k: document.get(k) for k in ASSET_EVENT_KEYS}
    if summary.table is not None:  # the event names the table and the version committed
        extra["table"] = summary.table.to_json()
    for outlet in op.outlets:
        context["outlet_events"][outlet].extra = extra
    return document


def fail_run(
    op: Any, api: EnrichmentApiHook, key: NamespaceKey, run_id: str, error: Exception
) -> NoReturn:
    """Fail the try: without automatic retries when the run failed as a whole or spent
    its budget (``AirflowFailException``), otherwise saying what the next try does;
    unless the run stopped for provider batches still running: the try then defers on
    them (``batch_deferral.py``)."""
    defer_while_batches_run(op, api, key, run_id)
    api.fail_for_a_spent_budget(op.summary_location(key), run_id)
    api.fail_for_a_failed_run(key, run_id)
    next_try = api.describe_next_try(key, op.resume)
    op.log.error("enrich_job failed; %s", next_try)
    raise AirflowException(f"enrich_job failed; {next_try}.\n{error}") from error
