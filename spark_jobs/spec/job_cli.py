"""The job's command line: flags over a ``--spec`` file over defaults, into a ``JobSpec``.

Every ``--help`` default is read from the field that holds it (``JobSpec``, or
``HttpEnricherConfig`` for the HTTP flags), so help and behaviour cannot drift apart.
"""

from __future__ import annotations

import argparse
import dataclasses
from fractions import Fraction
from typing import Any

from spark_jobs.defaults import (
    DEAD_LETTER_LAYOUTS,
    INPUT_FORMATS,
    MODES,
    OUTPUT_FORMATS,
    REDIRECT_POLICIES,
    RESUME_MODES,
    SPARK_LOG_LEVELS,
    WRITE_MODES,
)
from spark_jobs.enrichers import HttpEnricherConfig
from spark_jobs.snapshots.lease import MAX_TTL_S
from spark_jobs.spec.http_options import ATTEMPT_DEADLINE_SHARES
from spark_jobs.spec.job_spec import QUEUE_FACTOR, JobSpec
from spark_jobs.spec.spec_sources import HTTP_FLAGS, merge_options
from spark_jobs.spec.telemetry_options import ENDPOINT_VARIABLE, endpoint_from_environment


def option_defaults() -> dict[str, Any]:
    """Each option's default value where it has a fixed one (not None, not a switch),
    by ``dest``. The attempt deadlines are shares of ``--timeout`` instead."""
    found = {
        spec.name: spec.default
        for spec in dataclasses.fields(HttpEnricherConfig)
        if spec.name in HTTP_FLAGS and spec.name not in ATTEMPT_DEADLINE_SHARES
    }
    found.update({spec.name: spec.default for spec in dataclasses.fields(JobSpec)})
    return {
        name: value
        for name, value in found.items()
        if value not in (None, dataclasses.MISSING) and not isinstance(value, bool)
    }


def shown(value: Any) -> str:
    """A default as ``--help`` prints it: ``30`` for 30.0."""
    return f"{value:g}" if isinstance(value, float) else str(value)


class _Options:
    """``add_argument`` that appends ``(default X)`` to the help from ``option_defaults``."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser
        self.defaults = option_defaults()

    def __call__(self, *flags: str, help: str, **kwargs: Any) -> None:
        action = self.parser.add_argument(*flags, help=help, **kwargs)
        if action.dest in self.defaults:
            action.help = f"{help} (default {shown(self.defaults[action.dest])})"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="enrich_job",
        description="Enrich a batch by calling an API per record, resumably (Spark job).",
        argument_default=argparse.SUPPRESS,  # absent flags leave spec-file values alone
    )
    _add_data_options(_Options(parser))
    _add_request_options(_Options(parser))
    _add_call_options(_Options(parser))
    _add_model_options(_Options(parser))
    _add_run_options(_Options(parser))
    _add_failure_options(_Options(parser))
    _add_telemetry_options(_Options(parser))
    return parser


def _add_data_options(add: _Options) -> None:
    add("--spec", help="YAML/JSON file with the same options (flags win)")
    add("--input", help="input path (file, directory or glob; any Spark/Hadoop URL)")
    add("--input-format", choices=INPUT_FORMATS, help="input file format")
    add(
        "--input-option",
        dest="input_options",
        action="append",
        metavar="KEY=VALUE",
        help="a Spark reader option over the job's own, e.g. sep=; or encoding=latin1 "
        "(repeatable; default: CSV per RFC 4180 with a header; mode, inferSchema and "
        "columnNameOfCorruptRecord are refused)",
    )
    add(
        "--output",
        help="output directory (data/, dead_letters/, _SUMMARY.json), or the table's location",
    )
    add(
        "--output-format",
        choices=OUTPUT_FORMATS,
        help="parquet (run folders named by _SUMMARY.json) or a table: delta, iceberg",
    )
    add(
        "--write-mode",
        choices=WRITE_MODES,
        help="how a run's rows join a table: append, replace-interval (the rows of "
        "--interval-start), merge (by --key-column: enriched columns updated)",
    )
    add(
        "--dead-letter-layout",
        choices=DEAD_LETTER_LAYOUTS,
        help="a table's dead letters: a table beside it (<output>_dead_letters), or "
        "inline (_status, _error, _attempts columns)",
    )
    add("--interval-column", help="a table's partition column holding --interval-start")
    add("--iceberg-table", help="an Iceberg output's identifier, namespace.table")
    add(
        "--iceberg-catalog",
        action="append",
        metavar="KEY=VALUE",
        help="an Iceberg output's catalog property for pyiceberg (repeatable; default: a "
        "SQLite catalog beside a local table; secrets in PYICEBERG_CATALOG__ENRICHMENT__*)",
    )
    add("--key-column", help="record key, one column or several (a,b): partitioning, sorting")
    add("--event-time-column", help="event time column: enables watermarks")
    add("--max-out-of-orderness", type=float, help="seconds of event-time disorder")
    add("--partitions", type=int, help="fixed partition count")
    add("--url-template", help="e.g. http://api/customers/{id}")
    add(
        "--response-field",
        dest="response_fields",
        action="append",
        help="NAME=JSONPATH[:TYPE], TYPE one of string,int,float,bool,json (repeatable)",
    )
    add("--enricher", help="package.module:function, a user async function instead of HTTP")


def _add_request_options(add: _Options) -> None:
    """What each call sends: method, body, headers and where its secrets come from."""
    add("--method", type=str.upper, help="HTTP method: GET, POST, PUT, PATCH or DELETE")
    add(
        "--body-template",
        metavar="JSON",
        help='JSON body; {field} placeholders in its strings, e.g. {"street": "{street}"}',
    )
    add(
        "--header",
        dest="headers",
        action="append",
        metavar="NAME=VALUE",
        help="a header sent with every call, not a secret (repeatable)",
    )
    add(
        "--secret-header",
        dest="secret_headers",
        action="append",
        metavar="NAME=VARIABLE",
        help="a header whose value is read from environment variable VARIABLE, e.g. "
        "X-Api-Key=CRM_KEY (repeatable)",
    )
    add(
        "--token-env",
        help="environment variable holding a bearer token, sent as Authorization: Bearer "
        "(never the token)",
    )
    add(
        "--follow-redirects",
        choices=REDIRECT_POLICIES,
        help="none: a 3xx answer is a dead letter naming where it pointed; same-origin: "
        "follow redirects to the same scheme, host and port, each hop a call of its own "
        "(rate limit, budget); never to another host, which would receive the secrets",
    )


def _add_call_options(add: _Options) -> None:
    add(
        "--requests-per-second",
        type=float,
        help="request rate of the whole job, shared by the partitions running at once",
    )
    add(
        "--max-concurrent-partitions",
        type=int,
        help="partitions that run at once, sharing --requests-per-second (default: the "
        "cluster's task slots from the Spark conf; the partition count if it cannot tell)",
    )
    add("--capacity", type=int, help="requests in flight per partition")
    add(
        "--queue-capacity",
        type=int,
        help=f"records the operator holds per partition: in flight, waiting for a slot, or "
        f"done and waiting for their turn (default {QUEUE_FACTOR} x --capacity with the HTTP "
        f"enricher, --capacity with --enricher)",
    )
    add("--mode", choices=MODES, help="output order: input order, or completion order")
    add("--timeout", type=float, help="seconds per record, retries included")
    add("--max-attempts", type=int, help="calls per record, the first included")
    for flag, what in (
        ("--connect-timeout", "seconds to connect"),
        ("--first-byte-timeout", "seconds until the response headers"),
        ("--read-timeout", "seconds a body may stall before it is cut off and retried"),
        ("--total-timeout", "seconds for the whole answer"),
    ):
        share = Fraction(ATTEMPT_DEADLINE_SHARES[flag[2:].replace("-", "_")]).limit_denominator()
        add(flag, type=float, help=f"per attempt: {what} (default: {share} of --timeout)")
    add(
        "--max-response-bytes",
        type=int,
        help="largest response body, decompressed; larger is a dead letter",
    )
    _add_resend_options(add)
    add("--cache-dir", help="response cache across runs (a path or fsspec URL; default: off)")
    add("--cache-ttl", help="how long cached answers are used: 3600, 15m, 12h, 7d")
    add(
        "--cache-key-env",
        metavar="VAR",
        help="environment variable (read on the executors) with the key that signs the "
        "cache's entries; when unset, a key derived from the API's secrets",
    )
    add("--cost-per-request", type=float, help="price of one call, for the summary's estimate")
    add(
        "--max-requests",
        type=int,
        help="request budget of this run (partitions claim it in chunks): once spent, the job "
        "commits a snapshot and exits with status 4; the next run resumes (default: none)",
    )


def _add_resend_options(add: _Options) -> None:
    """A call sent a second time: both may be paid, so off by default, idempotent only."""
    add(
        "--hedge-after",
        metavar="SECONDS|pNN",
        help="send a second request (idempotent methods) when the first takes this long, "
        "or longer than this percentile of recent latencies, e.g. p95; first answer wins "
        "(default: off)",
    )
    add(
        "--resend-stragglers",
        action="store_true",
        help="once a partition's input has ended, cut a silent call that later ones overtook "
        "and send it again (idempotent methods; both may be paid; default: off)",
    )


def _add_model_options(add: _Options) -> None:
    """A model endpoint instead of a plain API (``spark_jobs/spec/model_options.py``)."""
    add(
        "--model",
        metavar="JSON",
        help='a model endpoint at --url-template, e.g. {"model": "gpt-4o-mini", "prompt": '
        '"Classify: {title}", "output_schema": {...}} (docs/model-endpoints.md)',
    )
    add(
        "--model-mode",
        choices=("online", "batch"),
        help="the model's requests one call each (online), or through the provider's batch "
        "API at half the price (batch); default: the model section's mode, else online",
    )
    add(
        "--max-cost",
        type=float,
        help="spend budget of this run at the model's prices per million tokens: once "
        "spent, the job commits a snapshot and exits with status 4 (default: none)",
    )
    add(
        "--detach-batches",
        action="store_true",
        help="in model batch mode, stop once every record is answered or in a provider "
        "batch, without waiting for the batches: the job commits a snapshot and exits with "
        "status 8; a run again reads the rows of the batches that ended",
    )
    add(
        "--estimate",
        action="store_true",
        help="print the expected tokens and cost of the model run from a sample of the "
        "input, then exit without calling the model",
    )


def _add_run_options(add: _Options) -> None:
    add("--snapshot-dir", help="snapshot root URL (local path, file://, s3://, hdfs://)")
    add("--snapshot-interval", type=float, help="seconds between snapshots")
    add(
        "--resume",
        choices=RESUME_MODES,
        help="auto: resume when valid, never: start fresh, require: fail unless resumable",
    )
    add("--dag-id", help="snapshot namespace: DAG id")
    add("--task-id", help="snapshot namespace: task id")
    add("--interval-start", help="snapshot namespace: data interval start")
    add("--progress-interval", type=float, help="seconds between progress lines")
    add("--snapshot-max-rows", type=int, help="cut a snapshot when this many outputs wait")
    add(
        "--gc-young-threshold",
        type=int,
        metavar="N",
        help="raise the Python workers' young-generation GC threshold to N allocations while "
        "a partition runs, e.g. 10000: less CPU per record for an API that answers in a few "
        "milliseconds (default: the process's own)",
    )
    add("--keep-snapshots", action="store_true", help="keep the namespace after success")
    add(
        "--run-id",
        help="name of this run in the summary: one path component of letters, digits and "
        "_ - . : + (default: random)",
    )
    add(
        "--lease-ttl",
        type=float,
        help="seconds a run's hold on its snapshot namespace lasts unless renewed; another "
        f"run takes it over after that (at most {MAX_TTL_S:g})",
    )
    add(
        "--lease-wait",
        type=float,
        help="seconds to wait while another live run holds the namespace",
    )
    add(
        "--spark-log-level",
        choices=SPARK_LOG_LEVELS,
        help="level of Spark's own logging under spark-submit (python -m shows WARN and up); "
        "the job's decision, progress and summary always show",
    )
    add(
        "--ship-env",
        metavar="PEX",
        help="the packed runtime from `make dist` (dist/enrich_env.pex) for executors that "
        "lack the job's packages (YARN, Kubernetes, a bare standalone cluster)",
    )
    add(
        "--remote",
        metavar="sc://HOST:PORT",
        help="run as a Spark Connect client of this server, shipping the job's code to it "
        "(default: the SPARK_REMOTE environment variable, else classic Spark); a URL with a "
        "token belongs in SPARK_REMOTE only",
    )


def _add_failure_options(add: _Options) -> None:
    """When a run stops or fails as a whole instead of dead-lettering (``run_failures``)."""
    add(
        "--outage-threshold",
        type=int,
        help="consecutive transient call failures that fail the task for a later resume "
        "instead of dead-lettering through an outage; 0 disables",
    )
    add(
        "--systemic-threshold",
        type=int,
        help="records in a row failing with one permanent error (same class and HTTP status, "
        "e.g. 400) that stop the run, exit 6, instead of dead-lettering them; 0 disables. "
        "An account-level answer (spent quota, billing limit, refused key, unknown model) "
        "stops the run at the first one whatever this says",
    )
    add(
        "--max-dead-letters",
        metavar="N|P%",
        help="more dead letters than this (a count, or a share of the input) fail the run, "
        "exit 7, publishing nothing and keeping the snapshots (default: no limit)",
    )
    add(
        "--retry-dead-letters",
        nargs="?",
        const="all",
        metavar="CLASSES",
        help="enrich again only the dead letters of the last result (published, or rejected "
        "by --max-dead-letters): all, or those of these error classes (ThrottledError,"
        "ServerError); publishes the merged result (default: off)",
    )


def _add_telemetry_options(add: _Options) -> None:
    """The workers' metrics (docs/telemetry.md)."""
    add(
        "--otel-endpoint",
        metavar="URL",
        help="OTLP/HTTP collector base URL for the workers' metrics, e.g. "
        f"http://collector:4318 (default: ${ENDPOINT_VARIABLE}, else off)",
    )
    add("--otel-interval", type=float, help="seconds between two exports of a worker's metrics")


def parse_args(argv: list[str] | None = None) -> JobSpec:
    """Flags over spec file over defaults; raises SpecError naming the bad option."""
    values, spec_path = merge_options(vars(build_parser().parse_args(argv)))
    values["otel_endpoint"] = endpoint_from_environment(values.get("otel_endpoint"))
    spec = JobSpec.from_mapping(values, source=spec_path or "command line")
    spec.check_driver_files()
    return spec
