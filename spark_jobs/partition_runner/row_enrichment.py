"""From a job spec to the async function the operator calls for one input row.

Both kinds of enrichment end in the same shape, a dict of typed output fields: the HTTP
enricher maps the response through the spec's JSON paths, and a user's function's returned
document goes through the very same paths, so the output schema never depends on which
one ran. Rows that cannot be enriched (no key, malformed input, bad event time) fail here,
before any call, as permanent failures: they become dead letters naming file and field.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from spark_jobs.enrichers import HttpEnricher, PermanentError, RequestBudget, open_user_function
from spark_jobs.enrichers.calls import CallsFactory, FieldMapping
from spark_jobs.enrichers.dedup import LruCache
from spark_jobs.enrichers.model_endpoint import ModelAnswers, ModelConfig, ModelPacing
from spark_jobs.enrichers.model_endpoint.batch_calls import BatchMode
from spark_jobs.enrichers.model_endpoint.embedding_batches import embedding_batches
from spark_jobs.partition_runner.cache_scope import read_cache_scope
from spark_jobs.partition_runner.input_lines import describe_lines, record_lines
from spark_jobs.partition_runner.response_cache import ResponseCache
from spark_jobs.records.enricher_stats import EnricherStats
from spark_jobs.snapshots.batch_journal import BatchJournal
from spark_jobs.spec.input_options import CORRUPT_RECORD
from spark_jobs.spec.job_spec import JobSpec
from spark_jobs.spec.model_options import model_config
from spark_jobs.spec.option_values import parse_duration
from spark_jobs.telemetry import NO_TELEMETRY, PartitionTelemetry

logger = logging.getLogger(__name__)

#: Columns the driver adds for the runner; never part of the output.
EVENT_MS = "__event_ms"
SOURCE_FILE = "__source_file"
HELPER_COLUMNS = (EVENT_MS, SOURCE_FILE)

RowFunction = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class InvalidRowError(PermanentError):
    """The input row itself is unusable; calling again would not help."""


def row_problem(row: Mapping[str, Any], spec: JobSpec) -> str | None:
    """Why this row cannot be enriched, naming the file and field; None if it can.

    Runs for every row: the message (and the file it names) is built only for a bad one.
    """
    corrupt = row.get(CORRUPT_RECORD)
    if corrupt is not None:
        return (
            f"malformed {spec.input_format} record {_line(row, corrupt, spec)}: {corrupt[:200]!r}"
        )
    key = spec.key_column  # not spec.key_columns: this runs for every row
    for column in (key,) if isinstance(key, str) else key:
        if row.get(column) is None:
            return f"key column {column!r} is null {_where(row)}"
    event_column = spec.event_time_column
    if event_column and row.get(EVENT_MS) is None:
        value = row.get(event_column)
        return f"event time column {event_column!r} {_where(row)}: {value!r} is not a timestamp"
    return None


def _where(row: Mapping[str, Any]) -> str:
    return f"in {row.get(SOURCE_FILE) or 'the input'}"


def _line(row: Mapping[str, Any], text: str, spec: JobSpec) -> str:
    """The file and line(s) of a malformed row (looked up only for such a row)."""
    url = row.get(SOURCE_FILE)
    if not url:
        return _where(row)
    options = {name.lower(): value for name, value in spec.input_options.items()}
    encoding = options.get("encoding") or options.get("charset") or "utf-8"
    try:
        lines = describe_lines(record_lines(url, text, encoding))
    except (OSError, LookupError) as error:  # unreadable now, or an unknown encoding
        lines = f"at an unknown line ({type(error).__name__}: {error})"
    return f"in {url} {lines}"


@dataclass
class RowEnrichment:
    """The operator's function for rows, plus its cost counters so far (``requests_made``
    and calls saved), which the manifests carry and the summary adds up."""

    call: RowFunction
    counters: Callable[[], dict[str, int]]
    stored: ResponseCache | None = None
    """The partition's part of the response cache, whose new answers each cut writes."""
    input_ended: Callable[[], None] = lambda: None
    """Told when the partition's input has ended (the HTTP enricher's stragglers)."""
    recent_calls: Callable[[], dict[str, int]] = dict
    """The last minute's answers by outcome, which each cut carries for progress lines
    (the HTTP enricher's ``call_outcomes.py``; a user's function counts none)."""
    stats: Callable[[], EnricherStats] = EnricherStats
    """What the telemetry exports (a user's function counts its calls only)."""


@asynccontextmanager
async def open_row_enrichment(
    spec: JobSpec,
    partition: int,
    request_budget: RequestBudget | None = None,
    answered: LruCache[dict[str, Any]] | None = None,
    telemetry: PartitionTelemetry = NO_TELEMETRY,
    batch_journal: BatchJournal | None = None,
) -> AsyncIterator[RowEnrichment]:
    """Open the spec's enrichment (one HTTP session, or the user's function) for a partition,
    with the partition's part of the response cache when ``cache_dir`` is set. Once
    ``request_budget`` is spent, a call raises ``BudgetExhausted`` instead. ``answered``
    starts the HTTP enricher's LRU cache (answers a resumed partition already paid for).
    ``telemetry`` times the requests and reads the enrichment's counters. A model in batch
    mode records its batches in ``batch_journal`` (the partition's, in its namespace)."""
    if spec.enricher:
        async with open_user_function(spec.enricher) as user_function:
            enrichment = _user_enrichment(spec, user_function, request_budget)
            telemetry.watch(enrichment.stats)
            yield enrichment
        return
    stored = None
    if spec.cache_dir:
        stored = await _open_response_cache(spec, spec.cache_dir, partition)
    config, model = spec.http_config(), model_config(spec)
    pacing = None
    if model is not None:  # under --max-cost the budget is the model's spend, in cost units
        pacing = ModelPacing(model, config.partitions, request_budget if spec.max_cost else None)
        request_budget = None if spec.max_cost else request_budget
    answers = ModelAnswers(model) if model is not None else None
    calls = None
    if model is not None:
        detach = spec.detach_batches
        calls = _model_calls(model, config.partitions, pacing, batch_journal, detach)
    try:
        async with HttpEnricher(
            config, stored, request_budget, answered, answers=answers, pacing=pacing, calls=calls
        ) as enrich:
            url = config.batch.url_template if config.batch else config.url_template
            enrich.observe_requests(telemetry.request_observer(url or ""))
            telemetry.watch(lambda: enrich.stats)
            counters = _http_counters(enrich)
            if pacing is not None:
                counters = _with_tokens(counters, pacing)
            yield RowEnrichment(
                _guarded(spec, enrich), counters, stored, enrich.input_ended, enrich.recent_calls
            )
    finally:
        if stored is not None:
            await asyncio.to_thread(stored.keep, stored.take())  # what no cut took
            logger.info(
                "response cache: %d new answers in %d files, at most %d held at once",
                stored.stored,
                stored.files_written,
                stored.most_held,
            )


def _model_calls(
    model: ModelConfig,
    partitions: int,
    pacing: ModelPacing | None,
    journal: BatchJournal | None,
    detach: bool,
) -> CallsFactory | None:
    """How a model's records reach it, when not one call each: rows of provider batches
    (``model.mode: batch``; ``detach``: not waited for), or embeddings many inputs a
    request."""
    if model.mode == "batch" and pacing is not None:
        if journal is None:
            raise ValueError("model.mode batch records its batches under --snapshot-dir")
        return BatchMode(model, journal, pacing, detach).calls
    return embedding_batches(model, partitions)


async def _open_response_cache(spec: JobSpec, cache_dir: str, partition: int) -> ResponseCache:
    """The partition's part of the response cache, loaded, signed with the run's cache scope."""
    config = spec.http_config()
    scope = read_cache_scope(
        spec.cache_key_env,
        config.headers,
        config.token_env,
        config.token_file,
        config.secret_headers,
    )
    stored = ResponseCache(
        cache_dir,
        partition=partition,
        partitions=spec.partitions,
        ttl_s=parse_duration(spec.cache_ttl),
        scope=scope,
    )
    await asyncio.to_thread(stored.load)
    return stored


def _http_counters(enrich: HttpEnricher) -> Callable[[], dict[str, int]]:
    return lambda: enrich.stats.call_counters()


def _with_tokens(
    counters: Callable[[], dict[str, int]], pacing: ModelPacing
) -> Callable[[], dict[str, int]]:
    """The call counters and the tokens paid for (``pacing.py`` counts them)."""
    return lambda: {**counters(), **pacing.counters}


def _guarded(spec: JobSpec, function: RowFunction) -> RowFunction:
    """Row validation before any call: a bad row fails at once, never retried.

    Not a coroutine itself: it raises or hands back ``function``'s, so the operator's
    ``await fn(record)`` sees both the same way, through one frame less."""

    def call(row: dict[str, Any]) -> Awaitable[dict[str, Any]]:
        if row.get(CORRUPT_RECORD) is not None:
            return _malformed(row, spec)
        _raise_if_invalid(row, spec)
        return function(_api_view(row))

    return call


def _user_enrichment(
    spec: JobSpec,
    user_function: Callable[..., Awaitable[Any]],
    request_budget: RequestBudget | None,
) -> RowEnrichment:
    """A user's function, its returned document mapped through the response fields as
    the HTTP enricher maps an answer (a value no column holds: ``InvalidResponseError``)."""
    fields = FieldMapping(spec.response_fields, redact=str)
    where = f"the function {spec.enricher}"
    calls = 0

    async def mapped(row: dict[str, Any]) -> dict[str, Any]:
        nonlocal calls
        if request_budget is not None:
            await request_budget.spend()
        calls += 1
        return fields.output(await user_function(row), where)

    return RowEnrichment(
        _guarded(spec, mapped),
        lambda: {"requests_made": calls},
        stats=lambda: EnricherStats(requests_made=calls),
    )


def _raise_if_invalid(row: Mapping[str, Any], spec: JobSpec) -> None:
    problem = row_problem(row, spec)
    if problem is not None:
        raise InvalidRowError(problem)


async def _malformed(row: Mapping[str, Any], spec: JobSpec) -> dict[str, Any]:
    """A malformed row's dead letter, its line looked up in a thread: reading its file
    must not stall the event loop and the calls of the other records in flight."""
    raise InvalidRowError(await asyncio.to_thread(row_problem, row, spec))


def _api_view(row: dict[str, Any]) -> dict[str, Any]:
    """The row as the enrichment sees it: without the runner's helper columns."""
    return {k: v for k, v in row.items() if k not in HELPER_COLUMNS}
