"""``--estimate``: the tokens and cost a model run would spend, before any call.

Renders the request of a sample of the input's records exactly as the run would (the
same body template), counts their prompt tokens as the pacing reserves them (the
messages' text and the schema, not the JSON around them) (``model_endpoint/tokens.py``: a
tokenizer where installed, a length estimate otherwise) and scales the mean to the
whole input. A completion's length is known only from its answer, so the completion
side is the most the run may spend: ``max_tokens`` (or ``model.completion_tokens``) per
record. Rows whose template fields are missing would be dead letters, not calls: they
are counted apart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spark_jobs.driver.input_reader import read_input
from spark_jobs.enrichers import EnrichmentError
from spark_jobs.enrichers.model_endpoint.tokens import prompt_tokens, tokenizer_name
from spark_jobs.enrichers.request_keys import request_keys
from spark_jobs.spec.job_spec import JobSpec
from spark_jobs.spec.model_options import model_config
from spark_jobs.spec.spec_error import SpecError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ESTIMATE_SAMPLE = 200
"""Records whose prompts are rendered and counted."""


def estimate_run(
    spark: SparkSession, spec: JobSpec, sample: int = ESTIMATE_SAMPLE
) -> dict[str, Any]:
    """The estimate as plain data (printed as JSON by the job)."""
    model = model_config(spec)
    if model is None:
        raise SpecError("--estimate: needs a model section (--model or model: in --spec)")
    frame = read_input(spark, spec)
    records = frame.count()
    keys = request_keys(spec.http_config())
    counts, unusable = [], 0
    for row in frame.limit(sample).collect():
        try:
            _, _, body = keys(row.asDict(recursive=True))
        except EnrichmentError:
            unusable += 1
            continue
        counts.append(prompt_tokens(body or ""))
    mean = sum(counts) / len(counts) if counts else 0.0
    callable_records = round(records * len(counts) / max(1, len(counts) + unusable))
    prompt = round(mean * callable_records)
    completion = model.completion_reserve * callable_records
    report: dict[str, Any] = {
        "records_in": records,
        "mode": model.mode,  # batch: priced at the batch price (half)
        "sampled": len(counts) + unusable,
        "sample_without_fields": unusable,
        "tokenizer": tokenizer_name(),
        "prompt_tokens_per_record": round(mean, 1),
        "prompt_tokens": prompt,
        "completion_tokens_at_most": completion,
    }
    if model.priced:
        report["cost_at_most"] = round(model.cost(prompt, completion), 6)
        report["prompt_cost"] = round(model.cost(prompt, 0), 6)
    return report
