"""The enrichment job's specification: command-line flags and an optional spec file.

A YAML/JSON ``--spec FILE`` holds the same options as the flags (``snake_case`` keys);
flags given on the command line win. Everything is validated here, before Spark starts,
and every error names the option at fault. Secrets never travel through the spec: the
API token is read on the executors from ``token_env`` or ``token_file``.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from spark_jobs.enrichers import HttpEnricherConfig, ResponseField

INPUT_FORMATS = ("jsonl", "parquet", "csv")
RESUME_MODES = ("auto", "never", "require")

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
# With the HTTP enricher the operator's queue holds this many times ``capacity``: records
# finished behind a slow one (ordered mode, a Retry-After, a stall) keep waiting for their
# turn while new requests still go out, so one wait does not idle the whole partition.
QUEUE_FACTOR = 4
# Flags that are HTTP enricher settings: they travel in ``http``, like the spec file's.
HTTP_FLAGS = (
    "token_env",
    "requests_per_second",
    *ATTEMPT_DEADLINE_SHARES,
    "max_response_bytes",
    "hedge_after",
)


class SpecError(ValueError):
    """A bad option or spec file; the message names the option."""


@dataclass(frozen=True)
class JobSpec:
    input: str
    output: str
    key_column: str
    snapshot_dir: str
    input_format: str = "jsonl"
    event_time_column: str | None = None
    max_out_of_orderness: float = 0.0
    """Seconds of event-time disorder tolerated by the watermark generator."""
    watermark_every: int = 100
    url_template: str | None = None
    response_fields: dict[str, ResponseField] = field(default_factory=dict)
    enricher: str | None = None
    """``package.module:function``: a user's async function instead of the HTTP enricher."""
    http: dict[str, Any] = field(default_factory=dict)
    """Further HttpEnricherConfig options (method, headers, token_env, batching...)."""
    partitions: int = 8
    capacity: int = 100
    queue_capacity: int | None = None
    """Records the operator holds per partition: in flight, waiting for a request slot, or
    done and waiting for their turn (ordered mode, watermarks). Default: QUEUE_FACTOR x
    capacity with the HTTP enricher, which keeps at most ``capacity`` requests in flight
    itself; ``capacity`` with ``--enricher``, whose calls the queue alone bounds."""
    mode: str = "unordered"
    timeout: float = 30.0
    max_attempts: int = 5
    snapshot_interval: float = 10.0
    snapshot_max_rows: int = 50_000
    """A snapshot is also cut when this many outputs wait for one (bounds memory)."""
    resume: str = "auto"
    dag_id: str = "manual"
    task_id: str = "enrich"
    interval_start: str = "default"
    keep_snapshots: bool = False
    progress_interval: float = 10.0
    outage_threshold: int = 50
    """Records in a row failing transiently (after retries) that stop the partition for a
    later resume instead of dead-lettering through an outage (0: never)."""
    cache_dir: str | None = None
    """Response cache across runs (any fsspec URL); off when None."""
    cache_ttl: str = "1d"
    """How long a cached answer is used: seconds, or a number with s, m, h or d."""
    cost_per_request: float | None = None
    """Price of one API call, for the estimated cost in the summary."""
    max_requests: int | None = None
    """Request budget of one run, split evenly across partitions; None for no limit."""
    run_id: str | None = None
    """Names this run (the request budget is per run); a random one when None."""
    lease_ttl: float = 60.0
    """Seconds a run's lease on its namespace lasts unless renewed (renewed every third)."""
    lease_wait: float = 3600.0
    """Seconds to wait for another live run of the namespace to finish before failing."""
    ship_env: str | None = None
    """The packed runtime (``make dist``: ``dist/enrich_env.pex``) for executors that lack
    the job's packages: shipped with the job and run as the executors' Python."""

    def __post_init__(self) -> None:
        _check(
            self.input_format in INPUT_FORMATS,
            "input_format",
            f"must be one of {', '.join(INPUT_FORMATS)}, got {self.input_format!r}",
        )
        _check(
            self.mode in ("ordered", "unordered"),
            "mode",
            f"must be ordered or unordered, got {self.mode!r}",
        )
        _check(
            self.resume in RESUME_MODES,
            "resume",
            f"must be one of {', '.join(RESUME_MODES)}, got {self.resume!r}",
        )
        for name in (
            "partitions",
            "capacity",
            "max_attempts",
            "watermark_every",
            "snapshot_max_rows",
        ):
            value = getattr(self, name)
            _check(
                isinstance(value, int) and value >= 1,
                name,
                f"must be a positive integer, got {value!r}",
            )
        for name in ("timeout", "snapshot_interval", "progress_interval", "lease_ttl"):
            _check(getattr(self, name) > 0, name, f"must be > 0, got {getattr(self, name)!r}")
        _check(self.max_out_of_orderness >= 0, "max_out_of_orderness", "must be >= 0")
        if self.queue_capacity is not None:
            _check(
                isinstance(self.queue_capacity, int) and self.queue_capacity >= 1,
                "queue_capacity",
                f"must be a positive integer, got {self.queue_capacity!r}",
            )
        self._check_cost_options()
        for name in ("input", "output", "key_column", "snapshot_dir"):
            _check(bool(getattr(self, name)), name, "is required")
        calls_http = bool(self.url_template or self.http.get("batch_url_template"))
        _check(
            calls_http != bool(self.enricher),
            "url_template",
            "give exactly one of --url-template (HTTP API) or --enricher (your function)",
        )
        _check(
            bool(self.response_fields),
            "response_field",
            "at least one --response-field NAME=JSONPATH[:TYPE] is needed",
        )
        if self.enricher is None:
            try:
                self.http_config()
            except (TypeError, ValueError) as error:
                raise SpecError(f"http: {error}") from None

    def check_driver_files(self) -> None:
        """Files only the driver reads (executors get the spec too, without them)."""
        if self.ship_env is None:
            return
        _check(
            Path(self.ship_env).is_file() and self.ship_env.endswith(".pex"),
            "ship_env",
            f"expected the .pex file built by `make dist`, got {self.ship_env!r}",
        )

    def _check_cost_options(self) -> None:
        if self.max_requests is not None:
            _check(
                isinstance(self.max_requests, int) and self.max_requests >= 1,
                "max_requests",
                f"must be a positive integer, got {self.max_requests!r}",
            )
            _check(not self.http.get("batch_size"), "max_requests", "not with batching")
        if self.cost_per_request is not None:
            _check(
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
        _check(not self.enricher, "cache_dir", "caches HTTP answers; not with --enricher")
        _check(
            not self.http.get("batch_size"),
            "cache_dir",
            "caches single requests; not with batching (http.batch_size)",
        )

    @property
    def operator_capacity(self) -> int:
        """The async wait operator's capacity (see ``queue_capacity``)."""
        if self.queue_capacity is not None:
            return self.queue_capacity
        return self.capacity if self.enricher else QUEUE_FACTOR * self.capacity

    def request_budget(self, partition: int) -> int | None:
        """This partition's share of ``max_requests`` (the shares add up to it exactly)."""
        if self.max_requests is None:
            return None
        share, extra = divmod(self.max_requests, self.partitions)
        return share + (1 if partition < extra else 0)

    def http_config(self) -> HttpEnricherConfig:
        """The HTTP enricher's configuration for one partition's share of the job.

        Attempt deadlines not set explicitly are derived from ``timeout``; an explicit
        attempt deadline must leave the record time for a retry.
        """
        derived = {name: self.timeout * share for name, share in ATTEMPT_DEADLINE_SHARES.items()}
        options = {
            "url_template": self.url_template,
            "response_fields": self.response_fields,
            "key_field": self.key_column,
            "capacity": self.capacity,
            "partitions": self.partitions,
            **derived,
            **self.http,
        }
        attempt = options["total_timeout"]
        if attempt is not None and attempt >= self.timeout:
            raise ValueError(
                f"total_timeout ({attempt:g}s per attempt) must be shorter than --timeout "
                f"({self.timeout:g}s per record, retries included), or no retry fits"
            )
        return HttpEnricherConfig.from_dict(options)

    def enrichment_identity(self) -> dict[str, Any]:
        """What the enrichment computes (no secrets): part of the job fingerprint."""
        identity: dict[str, Any] = {
            "key_column": self.key_column,
            "event_time_column": self.event_time_column,
            "partitions": self.partitions,
            "response_fields": {k: [v.path, v.type] for k, v in self.response_fields.items()},
        }
        if self.enricher:
            identity["enricher"] = self.enricher
        else:
            identity["http"] = self.http_config().fingerprint()
        return identity

    def to_json(self) -> str:
        data = asdict(self)
        data["response_fields"] = {k: [v.path, v.type] for k, v in self.response_fields.items()}
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
        missing = [
            n for n in ("input", "output", "key_column", "snapshot_dir") if not values.get(n)
        ]
        if missing:
            flags = ", ".join("--" + n.replace("_", "-") for n in missing)
            raise SpecError(f"missing required option(s): {flags}")
        try:
            return cls(**values)
        except TypeError as error:
            raise SpecError(f"{source}: {error}") from None


_DURATION = re.compile(r"^(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[smhd]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str | float) -> float:
    """Seconds from ``90``, ``"90s"``, ``"15m"``, ``"12h"`` or ``"7d"``."""
    match = _DURATION.match(str(text).strip())
    if match is None or float(match["number"]) <= 0:
        raise ValueError(f"expected a positive duration such as 3600, 15m, 12h or 7d, got {text!r}")
    return float(match["number"]) * _UNIT_S[match["unit"]]


def _check(ok: bool, option: str, message: str) -> None:
    if not ok:
        raise SpecError(f"--{option.replace('_', '-')}: {message}")


_FIELD = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<path>\$[^:]*)(?::(?P<type>\w+))?$")


def parse_response_field(text: str) -> tuple[str, ResponseField]:
    """``NAME=JSONPATH[:TYPE]``, e.g. ``city=$.address.city`` or ``score=$.score:float``."""
    match = _FIELD.match(text)
    if not match:
        raise SpecError(
            "--response-field: expected NAME=JSONPATH[:TYPE] (e.g. score=$.score:float), "
            f"got {text!r}"
        )
    try:
        return match["name"], ResponseField(match["path"], match["type"] or "string")
    except ValueError as error:
        raise SpecError(f"--response-field {text!r}: {error}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="enrich_job",
        description="Enrich a batch by calling an API per record, resumably (Spark job).",
        argument_default=argparse.SUPPRESS,  # absent flags leave spec-file values alone
    )
    add = parser.add_argument
    add("--spec", help="YAML/JSON file with the same options (flags win)")
    add("--input", help="input path (file, directory or glob; any Spark/Hadoop URL)")
    add("--input-format", choices=INPUT_FORMATS, help="default: jsonl")
    add("--output", help="output directory: data/, dead_letters/, _SUMMARY.json")
    add("--key-column", help="record key: partitioning, sorting and URL placeholders")
    add("--event-time-column", help="event time column: enables watermarks")
    add("--max-out-of-orderness", type=float, help="seconds of event-time disorder (default 0)")
    add("--url-template", help="e.g. http://api/customers/{id}")
    add(
        "--response-field",
        dest="response_fields",
        action="append",
        help="NAME=JSONPATH[:TYPE], TYPE one of string,int,float,bool,json (repeatable)",
    )
    add("--enricher", help="package.module:function, a user async function instead of HTTP")
    add("--token-env", help="environment variable holding the API bearer token (never the token)")
    add("--requests-per-second", type=float, help="request budget of the whole job")
    add("--partitions", type=int, help="fixed partition count (default 8)")
    add("--capacity", type=int, help="requests in flight per partition (default 100)")
    add(
        "--queue-capacity",
        type=int,
        help=f"records the operator holds per partition: in flight, waiting for a slot, or "
        f"done and waiting for their turn (default {QUEUE_FACTOR} x --capacity with the HTTP "
        f"enricher, --capacity with --enricher)",
    )
    add("--mode", choices=("ordered", "unordered"), help="default: unordered")
    add("--timeout", type=float, help="seconds per record, retries included (default 30)")
    add("--max-attempts", type=int, help="calls per record, the first included (default 5)")
    add(
        "--connect-timeout",
        type=float,
        help="per attempt: seconds to connect (default: a sixth of --timeout)",
    )
    add(
        "--first-byte-timeout",
        type=float,
        help="per attempt: seconds until the response headers (default: a third of --timeout)",
    )
    add(
        "--read-timeout",
        type=float,
        help="per attempt: seconds a body may stall before it is cut off and retried "
        "(default: a tenth of --timeout)",
    )
    add(
        "--total-timeout",
        type=float,
        help="per attempt: seconds for the whole answer (default: half of --timeout)",
    )
    add(
        "--max-response-bytes",
        type=int,
        help="largest response body, decompressed; larger is a dead letter (default 10 MiB)",
    )
    add(
        "--hedge-after",
        metavar="SECONDS|pNN",
        help="send a second request (idempotent methods) when the first takes this long, "
        "or longer than this percentile of recent latencies, e.g. p95; first answer wins "
        "(default: off)",
    )
    add("--snapshot-dir", help="snapshot root URL (local path, file://, s3://, hdfs://)")
    add("--snapshot-interval", type=float, help="seconds between snapshots (default 10)")
    add("--resume", choices=RESUME_MODES, help="auto (default), never or require")
    add("--dag-id", help="snapshot namespace: DAG id (default manual)")
    add("--task-id", help="snapshot namespace: task id (default enrich)")
    add("--interval-start", help="snapshot namespace: data interval start (default default)")
    add(
        "--outage-threshold",
        type=int,
        help="consecutive transient call failures that fail the task for a later resume "
        "instead of dead-lettering through an outage (default 50, 0 disables)",
    )
    add("--progress-interval", type=float, help="seconds between progress lines (default 10)")
    add("--snapshot-max-rows", type=int, help="cut a snapshot when this many outputs wait")
    add("--keep-snapshots", action="store_true", help="keep the namespace after success")
    add(
        "--cache-dir",
        help="response cache across runs (local path or any fsspec URL; default: off)",
    )
    add("--cache-ttl", help="how long cached answers are used: 3600, 15m, 12h, 7d (default 1d)")
    add("--cost-per-request", type=float, help="price of one call, for the summary's estimate")
    add("--run-id", help="name of this run in the summary (default: random)")
    add(
        "--lease-ttl",
        type=float,
        help="seconds a run's hold on its snapshot namespace lasts unless renewed; another "
        "run takes it over after that (default 60)",
    )
    add(
        "--lease-wait",
        type=float,
        help="seconds to wait while another live run holds the namespace (default 3600)",
    )
    add(
        "--ship-env",
        metavar="PEX",
        help="the packed runtime from `make dist` (dist/enrich_env.pex) for executors that "
        "lack the job's packages (YARN, Kubernetes, a bare standalone cluster)",
    )
    add(
        "--max-requests",
        type=int,
        help="request budget of this run (split across partitions): once spent, the job "
        "commits a snapshot and exits with status 4; the next run resumes (default: none)",
    )
    return parser


def parse_args(argv: list[str] | None = None) -> JobSpec:
    """Flags over spec file over defaults; raises SpecError naming the bad option."""
    args = vars(build_parser().parse_args(argv))
    values: dict[str, Any] = {}
    spec_path = args.pop("spec", None)
    if spec_path:
        values.update(load_spec_file(spec_path))
    http = dict(values.get("http") or {})
    for http_option in HTTP_FLAGS:  # top level in a spec file too, as on the command line
        for source in (values, args):
            if http_option in source:
                http[http_option] = source.pop(http_option)
    if http:
        values["http"] = http
    if "response_fields" in args:
        args["response_fields"] = dict(parse_response_field(f) for f in args["response_fields"])
    values.update(args)
    spec = JobSpec.from_mapping(values, source=spec_path or "command line")
    spec.check_driver_files()
    return spec


def load_spec_file(path: str) -> dict[str, Any]:
    file = Path(path)
    if not file.is_file():
        raise SpecError(f"--spec: no such file {path}")
    try:
        data = yaml.safe_load(file.read_text())  # YAML is a superset of JSON
    except yaml.YAMLError as error:
        raise SpecError(f"--spec {path}: not valid YAML/JSON: {error}") from None
    if not isinstance(data, dict):
        raise SpecError(f"--spec {path}: expected a mapping of options at the top level")
    return {key.replace("-", "_"): value for key, value in data.items()}
