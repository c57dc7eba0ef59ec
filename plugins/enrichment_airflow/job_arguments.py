"""The job's command line from ``ResumableEnrichmentOperator``'s parameters.

Every parameter becomes the ``enrich_job`` flag of the same meaning, after templating; a
template that rendered an unset value (``""``, ``"None"``) adds no flag, so the job's own
default applies. Secrets are never among them: they travel as environment variables
(``EnrichmentApiHook.token_route``), and the flags only name those variables.
"""

from __future__ import annotations

import json
from typing import Any

from enrichment_airflow.enrichment_hook import EnrichmentApiHook
from spark_jobs.defaults import DEAD_LETTER_LAYOUTS, OUTPUT_FORMATS, RESUME_MODES, WRITE_MODES
from spark_jobs.snapshots import NamespaceKey


# ``op`` is a ResumableEnrichmentOperator after templating: its parameters are attributes
# of the same names (typed as ``Any``, since rendered templates may be any type).
def job_arguments(
    op: Any,
    api: EnrichmentApiHook,
    key: NamespaceKey,
    run_id: str,
    token_args: list[str],
) -> list[str]:
    """The job's flags from the operator's (rendered) parameters."""
    for name, choices in (
        ("resume", RESUME_MODES),
        ("output_format", OUTPUT_FORMATS),
        ("write_mode", WRITE_MODES),
        ("dead_letter_layout", DEAD_LETTER_LAYOUTS),
    ):
        if getattr(op, name) not in choices:
            raise ValueError(f"{name} must be one of {choices}, got {getattr(op, name)!r}")
    options: dict[str, object] = {
        "--input": op.input_path,
        "--input-format": op.input_format,
        "--output": op.output_path,
        "--key-column": op.key_column,
        "--url-template": api.url_template(op.url_path),
        "--partitions": op.partitions,
        "--capacity": op.capacity,
        "--snapshot-dir": api.snapshot_root,
        "--resume": op.resume,
        "--dag-id": key.dag_id,
        "--task-id": key.task_id,
        "--interval-start": key.interval_start,
        "--run-id": run_id,
        "--output-format": op.output_format,
    }
    if op.output_format != "parquet":  # a Parquet output refuses table options
        options.update(
            {"--write-mode": op.write_mode, "--dead-letter-layout": op.dead_letter_layout}
        )
    optional: dict[str, object] = {  # a template may render unset as "" or "None"
        "--event-time-column": op.event_time_column,
        "--cache-dir": op.cache_dir,
        "--cache-ttl": op.cache_ttl,
        "--max-requests": op.max_requests,
        "--cost-per-request": op.cost_per_request,
        "--max-dead-letters": op.max_dead_letters,
        "--retry-dead-letters": op.retry_dead_letters,
        "--model-mode": op.model_mode,
    }
    options.update({k: v for k, v in optional.items() if v not in (None, "", "None")})
    fields = [("--response-field", f"{n}={p}") for n, p in op.response_fields.items()]
    fields += [("--input-option", f"{k}={v}") for k, v in op.input_options.items()]
    pairs = [*((flag, str(value)) for flag, value in options.items()), *fields]
    pairs += _request_args(op)
    return [*(arg for pair in pairs for arg in pair), *token_args, *op.job_args]


def _request_args(op: Any) -> list[tuple[str, str]]:
    """The call's method, body and plain headers; secret ones travel by environment."""
    pairs = [("--method", op.method), ("--spark-log-level", op.spark_log_level)]
    body = op.body_template
    if body not in (None, "", "None"):  # a string is JSON text, e.g. from a template
        pairs.append(("--body-template", body if isinstance(body, str) else json.dumps(body)))
    pairs += [("--header", f"{name}={value}") for name, value in op.headers.items()]
    return pairs
