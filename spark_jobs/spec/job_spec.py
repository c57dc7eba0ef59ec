"""The enrichment job's specification: command-line flags and an optional spec file.

A YAML/JSON ``--spec FILE`` holds the same options as the flags (``snake_case`` keys);
flags given on the command line win (``job_cli.py`` reads both). Everything is validated
here, before Spark starts, and every error names the option at fault. Secrets never
travel through the spec: the API token is read on the executors from ``token_env`` or
``token_file``. Defaults shared with the Airflow side come from ``defaults.py``; fields
marked ``fingerprint`` are what the enrichment computes, so a change of one makes a
resumed run start fresh.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from spark_jobs import defaults
from spark_jobs.defaults import INPUT_FORMATS, MODES, RESUME_MODES, InputFormat, Mode, ResumeMode
from spark_jobs.enrichers import HttpEnricherConfig, ResponseField
from spark_jobs.enrichers.batch_config import nest_flat_options
from spark_jobs.enrichers.model_endpoint import ModelConfig
from spark_jobs.enrichers.validation import IDENTITY
from spark_jobs.snapshots.paths import MAX_PARTITIONS
from spark_jobs.spec.failure_options import check_failure_options
from spark_jobs.spec.http_options import http_config
from spark_jobs.spec.input_options import check_input_options, key_column_value
from spark_jobs.spec.model_options import model_fields
from spark_jobs.spec.option_values import check, parse_duration, parse_response_field
from spark_jobs.spec.output_options import check_output_options
from spark_jobs.spec.path_overlap import check_separate_paths
from spark_jobs.spec.remote_option import check_remote_option
from spark_jobs.spec.run_options import check_run_options
from spark_jobs.spec.spec_error import SpecError
from spark_jobs.spec.telemetry_options import check_telemetry_options

# With the HTTP enricher the operator's queue holds this many times ``capacity``: records
# finished behind a slow one (ordered mode, a Retry-After, a stall) keep waiting for their
# turn while new requests still go out, so one wait does not idle the whole partition.
QUEUE_FACTOR = 4
BATCH_QUEUE = 10_000
"""Records a partition holds in provider batches at once (``model.mode: batch``) unless
``model.batch_size`` or ``queue_capacity`` says: fewer, larger batches."""
REQUIRED = ("input", "output", "key_column", "snapshot_dir")


@dataclass(frozen=True)
class JobSpec:
    input: str
    output: str
    key_column: str | list[str] = field(metadata=IDENTITY)  # several: "a,b" or a list
    snapshot_dir: str
    input_format: InputFormat = defaults.INPUT_FORMAT
    input_options: dict[str, str] = field(default_factory=dict)  # see input_options.py
    event_time_column: str | None = field(default=None, metadata=IDENTITY)
    max_out_of_orderness: float = 0.0
    """Seconds of event-time disorder tolerated by the watermark generator."""
    watermark_every: int = 100
    url_template: str | None = None
    """Part of the fingerprint through ``http_config()``."""
    response_fields: dict[str, ResponseField] = field(default_factory=dict, metadata=IDENTITY)
    enricher: str | None = None
    """``package.module:function``: a user's async function instead of the HTTP enricher
    (part of the fingerprint)."""
    http: dict[str, Any] = field(default_factory=dict)
    """Further HttpEnricherConfig options (method, headers, token_env, batching...)."""
    model: dict[str, Any] = field(default_factory=dict)
    """A model endpoint at ``url_template`` (``ModelConfig``; part of the fingerprint)."""
    partitions: int = field(default=defaults.PARTITIONS, metadata=IDENTITY)
    capacity: int = defaults.CAPACITY
    queue_capacity: int | None = None
    """Records the operator holds per partition: in flight, waiting for a request slot, or
    done and waiting for their turn (ordered mode, watermarks). Default: QUEUE_FACTOR x
    capacity with the HTTP enricher, which keeps at most ``capacity`` requests in flight
    itself; ``capacity`` with ``--enricher``, whose calls the queue alone bounds."""
    mode: Mode = defaults.MODE
    timeout: float = 30.0
    max_attempts: int = 5
    snapshot_interval: float = defaults.SNAPSHOT_INTERVAL_S
    snapshot_max_rows: int = 50_000
    """A snapshot is also cut when this many outputs wait for one (bounds memory)."""
    gc_young_threshold: int | None = None
    """Container allocations between two young-generation garbage collections in a Python
    worker while a partition runs (``partition_runner/gc_pacing.py``); None: the process's
    own thresholds, untouched."""
    resume: ResumeMode = defaults.RESUME
    dag_id: str = "manual"
    task_id: str = "enrich"
    interval_start: str = "default"
    keep_snapshots: bool = False
    progress_interval: float = 10.0
    outage_threshold: int = 50
    """Records in a row failing transiently (after retries) that stop the partition for a
    later resume instead of dead-lettering through an outage (0: never)."""
    systemic_threshold: int = 20
    """Records in a row failing with one permanent error that stop the run (see
    ``partition_runner/systemic.py``; 0: never). An account-level answer stops it at once."""
    max_dead_letters: str | None = None
    """``N`` or ``P%`` of the input: a run with more dead letters fails, publishing nothing."""
    retry_dead_letters: str | None = None
    """``all`` or error classes: enrich only those dead letters again (``dead_letter_retry``)."""
    cache_dir: str | None = None
    """Response cache across runs (any fsspec URL); off when None."""
    cache_ttl: str = defaults.CACHE_TTL
    """How long a cached answer is used: seconds, or a number with s, m, h or d."""
    cache_key_env: str = defaults.CACHE_KEY_ENV
    """Environment variable with the key that signs cache entries (``cache_scope.py``)."""
    cost_per_request: float | None = None
    """Price of one API call, for the estimated cost in the summary."""
    max_requests: int | None = None
    """Request budget of one run, claimed in chunks by the partitions that need it
    (``snapshots/budget_ledger.py``); None for no limit."""
    max_cost: float | None = None
    """Spend budget of one run at the model's prices, like ``max_requests``."""
    model_mode: str | None = None
    """``online`` or ``batch``: the model section's ``mode`` for this run (the Airflow
    operator's ``model_mode``); not part of the fingerprint, so a run may switch."""
    detach_batches: bool = False
    """In model batch mode, stop once every record is answered or waits in a provider
    batch, rather than wait for the batches (the Airflow operator's deferral)."""
    estimate: bool = False
    """Print the expected tokens and cost of a model run from a sample; call nothing."""
    max_concurrent_partitions: int | None = None
    """Partitions running at once, which share ``requests_per_second``; None: the driver
    reads the cluster's task slots from the Spark conf (``task_slots.py``)."""
    run_id: str | None = None
    """Names this run (the request budget is per run); a random one when None."""
    lease_ttl: float = 60.0
    """Seconds a run's lease on its namespace lasts unless renewed (renewed every third)."""
    lease_wait: float = 3600.0
    """Seconds to wait for another live run of the namespace to finish before failing."""
    ship_env: str | None = None
    """A packed runtime (``make dist``) shipped with the job, run as the executors' Python."""
    remote: str | None = None
    """A Spark Connect server, ``sc://host:port``: the job runs as its client (``connect.py``);
    None: ``SPARK_REMOTE``, else classic Spark. A URL with a token only in ``SPARK_REMOTE``."""
    spark_log_level: defaults.SparkLogLevel = defaults.SPARK_LOG_LEVEL
    otel_endpoint: str | None = None
    """OTLP/HTTP collector for the workers' metrics (``telemetry/``); off when None."""
    otel_interval: float = defaults.OTEL_INTERVAL_S
    lineage_parent: dict[str, str] = field(default_factory=dict)
    """The Airflow task's OpenLineage job, set by the driver (``lineage_parent.py``)."""
    output_format: defaults.OutputFormat = defaults.OUTPUT_FORMAT
    """``parquet`` (run folders named by ``_SUMMARY.json``) or ``delta`` (a Delta table at
    ``output``, one commit per run: ``driver/table_publish.py``)."""
    write_mode: defaults.WriteMode = defaults.WRITE_MODE
    """How a run's rows join a table output (``defaults.WriteMode``)."""
    dead_letter_layout: defaults.DeadLetterLayout = defaults.DEAD_LETTER_LAYOUT
    """A table output's dead letters: a table beside it, or inline columns."""
    interval_column: str = defaults.INTERVAL_COLUMN
    """A table output's partition column, holding ``interval_start``."""
    iceberg_table: str | None = None
    """An Iceberg output's identifier in its catalog (``namespace.table``); None:
    ``enrichment.<the output folder's name>``."""
    iceberg_catalog: dict[str, str] = field(default_factory=dict)
    """An Iceberg output's catalog, as pyiceberg properties (``type: rest``, ``uri``...;
    secrets in ``PYICEBERG_CATALOG__ENRICHMENT__*`` variables, never here); empty: an
    embedded SQL catalog in ``<output>.catalog.db`` (SQLite) beside a local table."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "input_options", check_input_options(self.input_options))
        object.__setattr__(self, "key_column", key_column_value(self.key_column))
        if self.model:  # its columns are the model's
            object.__setattr__(self, "response_fields", model_fields(self))
        for name, choices in (
            ("input_format", INPUT_FORMATS),
            ("mode", MODES),
            ("resume", RESUME_MODES),
            ("spark_log_level", defaults.SPARK_LOG_LEVELS),
        ):
            value = getattr(self, name)
            check(value in choices, name, f"must be one of {', '.join(choices)}, got {value!r}")
        check_remote_option(self.remote)
        self._check_numbers()
        self._check_cost_options()
        check_failure_options(self)
        check_telemetry_options(self)
        check_output_options(self)
        for name in REQUIRED:
            check(bool(getattr(self, name)), name, "is required")
        self._check_enrichment()

    def _check_numbers(self) -> None:
        positive_ints = ["partitions", "capacity", "max_attempts", "watermark_every"]
        positive_ints.append("snapshot_max_rows")
        for optional in ("queue_capacity", "max_concurrent_partitions", "gc_young_threshold"):
            if getattr(self, optional) is not None:
                positive_ints.append(optional)
        for name in positive_ints:
            value = getattr(self, name)
            check(
                isinstance(value, int) and value >= 1,
                name,
                f"must be a positive integer, got {value!r}",
            )
        for name in ("timeout", "snapshot_interval", "progress_interval"):
            check(getattr(self, name) > 0, name, f"must be > 0, got {getattr(self, name)!r}")
        check(self.max_out_of_orderness >= 0, "max_out_of_orderness", "must be >= 0")
        check(self.partitions <= MAX_PARTITIONS, "partitions", f"at most {MAX_PARTITIONS}")
        check_run_options(self)

    def _check_enrichment(self) -> None:
        calls_http = bool(self.url_template or self._batching)
        check(
            calls_http != bool(self.enricher),
            "url_template",
            "give exactly one of --url-template (HTTP API) or --enricher (your function)",
        )
        check(
            bool(self.response_fields),
            "response_field",
            "at least one --response-field NAME=JSONPATH[:TYPE] is needed",
        )
        single = isinstance(self.key_column, str)
        check(single or not self._batching, "key_column", "batching sends one key, not several")
        if self.enricher is None:
            try:
                self.http_config()
            except (TypeError, ValueError) as error:
                raise SpecError(f"http: {error}") from None

    @property
    def key_columns(self) -> tuple[str, ...]:
        key = self.key_column
        return (key,) if isinstance(key, str) else tuple(key)

    @property
    def _model_batch(self) -> bool:
        """The model's requests go through its provider's batch API (``model.mode``)."""
        return bool(self.model) and (self.model_mode or self.model.get("mode")) == "batch"

    @property
    def _batching(self) -> bool:
        """The ``http`` options ask for batch requests (nested, or flat ``batch_*``)."""
        try:
            return bool(nest_flat_options(self.http).get("batch"))
        except ValueError as error:
            raise SpecError(f"http: {error}") from None

    def check_driver_files(self) -> None:
        """Files only the driver reads (executors get the spec too, without them), and
        paths that must not overlap (``path_overlap.py``), before any data moves."""
        others = {"input": self.input, "snapshot_dir": self.snapshot_dir}
        check_separate_paths(self.output, {**others, "cache_dir": self.cache_dir})
        if self.ship_env is None:
            return
        check(
            Path(self.ship_env).is_file() and self.ship_env.endswith(".pex"),
            "ship_env",
            f"expected the .pex file built by `make dist`, got {self.ship_env!r}",
        )

    def _check_cost_options(self) -> None:
        check(self.max_cost is None or bool(self.model), "max_cost", "prices a model section")
        check(
            self.model_mode in (None, "online", "batch")
            and (not self.model_mode or bool(self.model)),
            "model_mode",
            f"online or batch, for a model section; got {self.model_mode!r}",
        )
        check(
            not (self._model_batch and self.max_requests is not None),
            "max_requests",
            "counts calls; a batch run's budget is --max-cost",
        )
        check(
            self._model_batch or not self.detach_batches,
            "detach_batches",
            "detaches from provider batches: for a model in batch mode",
        )
        check(
            not (self._model_batch and self.http.get("coalesce") is False),
            "http",
            "coalesce must stay on in model batch mode (a row is handed to one caller)",
        )
        if self.max_requests is not None:
            check(
                isinstance(self.max_requests, int) and self.max_requests >= 1,
                "max_requests",
                f"must be a positive integer, got {self.max_requests!r}",
            )
            check(not self._batching, "max_requests", "not with batching")
        if self.cost_per_request is not None:
            check(
                isinstance(self.cost_per_request, int | float) and self.cost_per_request >= 0,
                "cost_per_request",
                f"must be a number >= 0, got {self.cost_per_request!r}",
            )
        if self.cache_dir is None:
            return
        try:
            parse_duration(self.cache_ttl)
        except ValueError as error:
            raise SpecError(f"--cache-ttl: {error}") from None
        check(not self.enricher, "cache_dir", "caches HTTP answers; not with --enricher")
        check(
            not self._batching,
            "cache_dir",
            "caches single requests; not with batching (http.batch_size)",
        )

    @property
    def operator_capacity(self) -> int:
        """The async wait operator's capacity (see ``queue_capacity``)."""
        if self.queue_capacity is not None:
            return self.queue_capacity
        if self._model_batch:  # records wait in a batch together: as many as one holds
            return int(self.model.get("batch_size") or BATCH_QUEUE)
        return self.capacity if self.enricher else QUEUE_FACTOR * self.capacity

    @property
    def operator_call_capacity(self) -> int | None:
        """Records the operator lets call at once: the HTTP enricher's ``capacity``, as it
        sends no more, so a record starts when a request slot is free rather than parking
        in the enricher; None (the whole queue) with batching, a model's batch mode and a
        model's embeddings many inputs a request, whose calls wait together to fill a batch
        or a request, and with ``--enricher``."""
        if self.enricher or self._batching or self._model_batch or self._inputs_gathered:
            return None
        return self.capacity

    @property
    def _inputs_gathered(self) -> bool:
        """A model run's embeddings go many inputs a request (``model.inputs_per_request``)."""
        return bool(self.model) and ModelConfig.from_dict(self.model).inputs_a_request > 1

    @property
    def running_partitions(self) -> int:
        """Partitions that run at once: ``max_concurrent_partitions``, never more than
        there are (all of them when unknown, the share that cannot overshoot)."""
        return min(self.max_concurrent_partitions or self.partitions, self.partitions)

    def http_config(self) -> HttpEnricherConfig:
        """The HTTP enricher's configuration for one partition's share of the job."""
        return http_config(self)

    def enrichment_identity(self) -> dict[str, Any]:
        """What the enrichment computes (no secrets): part of the job fingerprint."""
        identity = {
            spec.name: getattr(self, spec.name)
            for spec in fields(self)
            if spec.metadata.get("fingerprint")
        }
        identity["response_fields"] = _plain_response_fields(self.response_fields)
        if self.enricher:
            identity["enricher"] = self.enricher
        else:
            identity["http"] = self.http_config().fingerprint()
        if self.model:
            identity["model"] = ModelConfig.from_dict(self.model).fingerprint()
        return identity

    def to_json(self) -> str:
        data = asdict(self)
        data["response_fields"] = _plain_response_fields(self.response_fields)
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> JobSpec:
        return cls.from_mapping(json.loads(text), source="job spec JSON")

    @classmethod
    def from_mapping(cls, data: dict[str, Any], *, source: str) -> JobSpec:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpecError(f"{source}: unknown option(s) {', '.join(unknown)}")
        values = dict(data)
        raw_fields = values.get("response_fields", {})
        if isinstance(raw_fields, list):  # ["name=$.path:type", ...] as on the command line
            raw_fields = dict(parse_response_field(item) for item in raw_fields)
        try:
            values["response_fields"] = {k: ResponseField.parse(v) for k, v in raw_fields.items()}
        except (AttributeError, ValueError) as error:
            raise SpecError(f"response_fields: {error}") from None
        missing = [name for name in REQUIRED if not values.get(name)]
        if missing:
            flags = ", ".join("--" + n.replace("_", "-") for n in missing)
            raise SpecError(f"missing required option(s): {flags}")
        try:
            return cls(**values)
        except TypeError as error:
            raise SpecError(f"{source}: {error}") from None


def _plain_response_fields(response_fields: dict[str, ResponseField]) -> dict[str, list[str]]:
    return {name: [spec.path, spec.type] for name, spec in response_fields.items()}
