"""The job's ``model:`` section: its checks, its output columns and its share of the cost
report, kept apart from ``job_spec.py`` as the HTTP enricher's are in ``http_options.py``.

A model run is an HTTP run whose endpoint is ``url_template`` and whose body, answer
mapping and pacing come from :class:`ModelConfig`; its output columns are the schema's
properties (or the answer, or the embedding) and the usage columns, typed by the schema
(``spark_io.output_arrow_schema`` asks :func:`output_types`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Protocol

import pyarrow as pa

from spark_jobs.enrichers import ResponseField
from spark_jobs.enrichers.model_endpoint import COST_UNITS, ModelConfig
from spark_jobs.records.cost import CostReport
from spark_jobs.spec.option_values import check
from spark_jobs.spec.spec_error import SpecError


class ModelOptions(Protocol):
    """What of the job spec (``JobSpec``) the model section is checked against."""

    @property
    def model(self) -> Mapping[str, Any]: ...
    @property
    def enricher(self) -> str | None: ...
    @property
    def max_cost(self) -> float | None: ...
    @property
    def max_requests(self) -> int | None: ...
    @property
    def model_mode(self) -> str | None: ...
    @property
    def response_fields(self) -> Mapping[str, ResponseField]: ...


def model_config(spec: ModelOptions) -> ModelConfig | None:
    """The spec's model section, validated; None without one."""
    if not spec.model:
        return None
    data = {**spec.model, **({"mode": spec.model_mode} if spec.model_mode else {})}
    try:
        return ModelConfig.from_dict(data)
    except (TypeError, ValueError) as error:
        raise SpecError(f"--model: {error}") from None


def model_fields(spec: ModelOptions) -> dict[str, ResponseField]:
    """The output fields of a model run (every column the model adds), which the spec
    holds as its ``response_fields``; a model run sets none of its own."""
    config = model_config(spec)
    assert config is not None
    derived = {name: ResponseField(f"$.{name}", "json") for name in output_types(config)}
    given = spec.response_fields
    check(
        not given or dict(given) == derived,
        "response_field",
        "a model run's columns come from model.output_schema (or model.output_column)",
    )
    check(not spec.enricher, "enricher", "give either --enricher or a model section")
    if spec.max_cost is not None:
        ok = isinstance(spec.max_cost, int | float) and spec.max_cost > 0
        check(ok, "max_cost", f"must be a positive number, got {spec.max_cost!r}")
        check(config.priced, "max_cost", "needs model.price_input/output_per_million")
        check(spec.max_requests is None, "max_cost", "give --max-cost or --max-requests")
    return derived


def output_types(config: ModelConfig) -> dict[str, pa.DataType]:
    try:
        return config.output_types()
    except ValueError as error:
        raise SpecError(str(error)) from None


def cost_units(max_cost: float) -> int:
    """``--max-cost`` in the ledger's units (``COST_UNITS`` per unit of currency)."""
    return max(1, math.floor(max_cost * COST_UNITS))


def token_report(config: ModelConfig, totals: Mapping[str, int], cost: CostReport) -> CostReport:
    """``cost`` with the run's tokens (calls paid for, every attempt) and, with prices,
    their cost: those paid through a batch API at its price, the others at the online
    one, whichever mode each attempt ran in (a run may switch)."""
    prompt, completion, batch_prompt, batch_completion = (
        int(totals.get(name, 0))
        for name in (
            "prompt_tokens",
            "completion_tokens",
            "batch_prompt_tokens",
            "batch_completion_tokens",
        )
    )
    report = replace(cost, prompt_tokens=prompt, completion_tokens=completion)
    if batch_prompt or batch_completion:
        report = replace(
            report, batch_prompt_tokens=batch_prompt, batch_completion_tokens=batch_completion
        )
    if not config.priced:
        return report
    online = config.cost(prompt - batch_prompt, completion - batch_completion, "online")
    batch = config.cost(batch_prompt, batch_completion, "batch")
    return replace(
        report,
        price_input_per_million=config.price_input_per_million,
        price_output_per_million=config.price_output_per_million,
        token_cost=round(online + batch, 6),
    )
