"""The HTTP enricher: one record in, its typed output fields out, via one HTTP call.

``async with HttpEnricher(config) as enrich:`` opens one ``aiohttp.ClientSession`` for
the partition (connections are pooled and kept alive across records); ``await
enrich(record)`` is the async function the operator calls. Per call, in order:

1. fill the URL (and body) template; a missing field is a permanent failure;
2. answer from the LRU cache, or join an identical request already in flight;
3. otherwise, or once per batch, send it (``sender.py``: a concurrency slot and a rate
   token, the attempt's own deadlines, hedging; the status mapped to a value or an
   error the retry predicate understands);
4. pick the typed output fields out of the answer.

The session is opened in ``session.py``.

Retries are the operator's job (``default_retry_strategy``), so every attempt comes
back through here and pays its token and slot like a first call.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from .batch_config import BatchConfig
from .batching import Batcher
from .call_pacing import CallPacing
from .config import HttpEnricherConfig
from .dedup import Coalescer, LruCache
from .errors import (
    EnrichmentError,
    InvalidResponseError,
    NotFoundError,
    is_retryable,
    snippet,
)
from .json_paths import CONVERTERS, ConversionError, compile_path, extract
from .request_budget import RequestBudget
from .request_keys import RequestKeys
from .sender import RequestSender
from .templates import UrlTemplate

if TYPE_CHECKING:
    import aiohttp

    from spark_jobs.telemetry import RequestObserver

Output = dict[str, Any]
AnswerMapping = Callable[[bytes, str, Callable[[str], str]], Output]
"""(raw 2xx body, where it came from, redact) -> the record's output fields."""


class StoredResponses(Protocol):
    """Raw successful answers kept across runs (``spark_jobs.response_cache``)."""

    def get(self, method: str, url: str, body: str | None) -> bytes | None: ...

    def put(self, method: str, url: str, body: str | None, payload: bytes) -> None: ...


class HttpEnricher:
    """Enriches records by HTTP per :class:`HttpEnricherConfig`; one instance per partition.

    ``stats`` reports what was sent and saved. The token is read on ``__aenter__`` and
    lives only in the session's default headers: it is never part of a message.
    """

    retry_predicate = staticmethod(is_retryable)

    def __init__(
        self,
        config: HttpEnricherConfig,
        stored: StoredResponses | None = None,
        request_budget: RequestBudget | None = None,
        answered: LruCache[Output] | None = None,
        *,
        answers: AnswerMapping | None = None,
        pacing: CallPacing | None = None,
    ) -> None:
        """``stored``: answers kept across runs; ``request_budget``: what this enricher
        may send before it raises :class:`BudgetExhausted` instead of sending;
        ``answered``: the LRU cache to start from, keyed by :class:`RequestKeys` (a
        resumed partition's replayed answers), instead of an empty one. ``answers``
        maps a body to the output instead of the ``response_fields`` paths, and
        ``pacing`` admits each call (both a model endpoint's: ``model_endpoint/``)."""
        if config.batch is not None and (stored is not None or request_budget is not None):
            raise ValueError("a response cache or a request budget does not work with batching")
        self.config = config
        self._stored = stored
        self._method = config.method
        self._batch: BatchConfig | None = config.batch
        self._request = RequestKeys(config)
        self._fields = [
            (name, spec.path, compile_path(spec.path), CONVERTERS[spec.type])
            for name, spec in config.response_fields.items()
        ]
        self._output_names = tuple(config.response_fields)
        self._cache: LruCache[Output] | None = answered
        if answered is None and config.cache_size:
            self._cache = LruCache(config.cache_size)
        self._coalescer: Coalescer[Output] | None = Coalescer() if config.coalesce else None
        self._sender = RequestSender(config, request_budget)
        self._sender.pacing = pacing
        self._answers: AnswerMapping = answers or self._mapped
        self._results_path = compile_path(config.batch.results_path) if config.batch else None
        self._batcher: Batcher[Any, Output] | None = None
        self.cache_hits = 0
        self.batches_sent = 0
        self.stored_hits = 0

    def __repr__(self) -> str:
        state = "open" if self._session is not None else "closed"
        target = self._batch.url_template if self._batch else self.config.url_template
        return f"<HttpEnricher {self._method} {target} ({state})>"

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def _session(self) -> aiohttp.ClientSession | None:
        return self._sender.session

    async def __aenter__(self) -> HttpEnricher:
        self._sender.open()
        if self._batch is not None:
            self._batcher = Batcher(self._send_batch, self._batch.size, self._batch.max_wait_s)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._batcher is not None:
            await self._batcher.aclose()
        await self._sender.close()

    # -- the async function -----------------------------------------------------------

    async def __call__(self, record: Mapping[str, Any]) -> Output:
        """The typed output fields for ``record``; raises an :class:`EnrichmentError`."""
        key, url, body = self._request(record)
        cache = self._cache
        if cache is not None:
            cached = cache.get(key)
            if cached is not None:
                self.cache_hits += 1
                return dict(cached)
        if self._coalescer is not None:
            if url is None:
                output = await self._coalescer.run(key, self._fetch_batched, key)
            else:
                output = await self._coalescer.run(key, self._fetch, key, url, body)
            return dict(output)
        if url is None:
            output = await self._fetch_batched(key)
        else:
            output = await self._fetch(key, url, body)
        return dict(output) if cache is not None else output

    async def _fetch(self, key: Any, url: str, body: str | None) -> Output:
        stored = self._stored
        payload = stored.get(self._method, url, body) if stored is not None else None
        if payload is not None:
            self.stored_hits += 1
            output = self._answers(payload, url, self._sender.redact)
        else:
            status, payload = await self._sender.request(self._method, url, body, allow_404=True)
            if status == 404:
                output = self._not_found(f"HTTP 404 from {self._method} {url}")
            else:
                output = self._answers(payload, url, self._sender.redact)
                if stored is not None:  # only answers that mapped cleanly are kept
                    stored.put(self._method, url, body, payload)
        if self._cache is not None:
            self._cache.put(key, output)
        return output

    async def _fetch_batched(self, key: Any) -> Output:
        if self._batcher is None:
            raise RuntimeError("use the enricher inside 'async with HttpEnricher(...)'")
        output = await self._batcher.submit(key)
        if self._cache is not None:
            self._cache.put(key, output)
        return output

    def _not_found(self, message: str) -> Output:
        if self.config.not_found == "fail":
            raise NotFoundError(self._sender.redact(message))
        return dict.fromkeys(self._output_names)

    def _mapped(self, payload: bytes, where: str, redact: Callable[[str], str]) -> Output:
        return self._output(self._parse(payload, where), where)

    def _output(self, document: Any, where: str) -> Output:
        output = {}
        for name, path, steps, convert in self._fields:
            value = extract(document, steps)
            if value is not None:
                try:
                    value = convert(value)
                except ConversionError as exc:
                    raise InvalidResponseError(
                        self._sender.redact(f"response field {name} ({path}) from {where}: {exc}")
                    ) from None
            output[name] = value
        return output

    def _parse(self, payload: bytes, url: str) -> Any:
        try:
            return json.loads(payload)
        except ValueError:
            raise InvalidResponseError(
                self._sender.redact(
                    f"invalid JSON from {self._method} {url}: "
                    f"{snippet(payload, self._sender.redact)!r}"
                )
            ) from None
        except RecursionError:
            raise InvalidResponseError(
                self._sender.redact(f"JSON from {self._method} {url} is nested too deeply to parse")
            ) from None

    # -- batching -----------------------------------------------------------------------

    async def _send_batch(self, keys: list[Any]) -> dict[Any, Output | Exception]:
        batch = self._batch
        assert batch is not None
        url = UrlTemplate(batch.url_template, "batch_url_template").fill({})
        body = json.dumps({batch.request_key: keys}, separators=(",", ":"))
        self.batches_sent += 1
        _, payload = await self._sender.request("POST", url, body, allow_404=False)
        assert self._results_path is not None
        items = extract(self._parse(payload, url), self._results_path)
        if not isinstance(items, list):
            raise InvalidResponseError(
                self._sender.redact(
                    f"no result list at {batch.results_path} in the response from "
                    f"POST {url}: {snippet(payload, self._sender.redact)!r}"
                )
            )
        id_field, error_field = batch.result_id_field, batch.error_field
        by_id = {
            str(item[id_field]): item
            for item in items
            if isinstance(item, dict) and id_field in item
        }
        outcomes: dict[Any, Output | Exception] = {}
        for key in keys:
            item = by_id.get(str(key))
            where = f"the batch item for {key!r}"
            try:
                if item is None or (error_field is not None and error_field in item):
                    outcomes[key] = self._not_found(f"{where} from POST {url} is missing")
                else:
                    outcomes[key] = self._output(item, where)
            except EnrichmentError as error:
                outcomes[key] = error
        return outcomes

    # -- observability ----------------------------------------------------------------

    def observe_requests(self, observer: RequestObserver | None) -> None:
        """Time every request with ``observer`` (telemetry on); None leaves them untimed."""
        self._sender.observer = observer

    @property
    def stats(self) -> dict[str, Any]:
        """Counters since the enricher was created, as plain (JSON-ready) data."""
        sender = self._sender
        return {
            "requests_made": sender.requests_made,
            "responses_by_status": dict(sender.responses_by_status),
            "retryable_errors": sender.retryable_errors,
            "throttled": sender.throttled,
            "cache_hits": self.cache_hits,
            "calls_saved_by_coalescing": (
                self._coalescer.saved_calls if self._coalescer is not None else 0
            ),
            "current_concurrency_limit": sender.limiter.limit,
            "in_flight": sender.limiter.in_flight,
            "concurrency_decreases": sender.limiter.decreases,
            "rate_decreases": sender.rate.decreases,
            "batches_sent": self.batches_sent,
            "hedges_sent": sender.hedges_sent,
            "retries_by_reason": dict(sender.retries_by_reason),
            "response_cache_hits": self.stored_hits,
        }
