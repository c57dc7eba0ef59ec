"""The HTTP enricher's configuration derived from the job's options.

The job spec holds the record-level settings (``--timeout``, ``--capacity``, the key) and
an ``http`` section; the enricher needs one config with every per-attempt deadline set.
This module derives what is not set from the record's budget, so ``--help``, the spec
check on the driver and each task build the same config.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from spark_jobs.enrichers import HttpEnricherConfig, ResponseField
from spark_jobs.enrichers.model_endpoint import ModelConfig, request_options

# Per-attempt deadlines as shares of the record's --timeout, unless set: a record whose
# first attempt stalls is cut off after a tenth of its budget and keeps most of it for
# retries (in ordered mode the stall also holds back its partition's output only that
# long). With the default 30 s: connect 5, first byte 10, stall 3, attempt 15.
ATTEMPT_DEADLINE_SHARES = {
    "connect_timeout": 1 / 6,
    "first_byte_timeout": 1 / 3,
    "read_timeout": 1 / 10,
    "total_timeout": 1 / 2,
}


class JobOptions(Protocol):
    """What of the job spec (``JobSpec``) the HTTP enricher's config is made from."""

    @property
    def timeout(self) -> float: ...
    @property
    def url_template(self) -> str | None: ...
    @property
    def response_fields(self) -> Mapping[str, ResponseField]: ...
    @property
    def key_column(self) -> str | list[str]: ...
    @property
    def capacity(self) -> int: ...
    @property
    def running_partitions(self) -> int: ...
    @property
    def http(self) -> Mapping[str, Any]: ...
    @property
    def model(self) -> Mapping[str, Any]: ...


def http_config(spec: JobOptions) -> HttpEnricherConfig:
    """The HTTP enricher's configuration for one partition's share of the job.

    Attempt deadlines not set explicitly are derived from ``timeout``; an explicit
    attempt deadline must leave the record time for a retry.
    """
    derived = {name: spec.timeout * share for name, share in ATTEMPT_DEADLINE_SHARES.items()}
    options = {
        "url_template": spec.url_template,
        "response_fields": spec.response_fields,
        "key_field": spec.key_column if isinstance(spec.key_column, str) else None,
        "capacity": spec.capacity,
        "partitions": spec.running_partitions,
        **derived,
        **spec.http,
    }
    if spec.model:  # a model endpoint: the body and method are the model section's
        options.update(request_options(ModelConfig.from_dict(spec.model), options))
    attempt = options["total_timeout"]
    if attempt is not None and attempt >= spec.timeout:
        raise ValueError(
            f"total_timeout ({attempt:g}s per attempt) must be shorter than --timeout "
            f"({spec.timeout:g}s per record, retries included), or no retry fits"
        )
    return HttpEnricherConfig.from_dict(options)
