"""The HTTP enricher: one record in, its typed output fields out, via one HTTP call.

``async with HttpEnricher(config) as enrich:`` opens one ``aiohttp.ClientSession`` for
the partition (connections are pooled and kept alive across records); ``await
enrich(record)`` is the async function the operator calls. Per call, in order:

1. fill the URL (and body) template; a missing field is a permanent failure;
2. answer from the LRU cache, or join an identical request already in flight;
3. otherwise send it, on its own or in a batch (``calls.py``; the sending itself in
   ``sender.py``: a concurrency slot and a rate token, the attempt's own deadlines,
   hedging; the status mapped to a value or an error the retry predicate understands);
4. pick the typed output fields out of the answer.

The session is opened in ``session.py``.

Retries are the operator's job (``default_retry_strategy``), so every attempt comes
back through here and pays its token and slot like a first call.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from spark_jobs.records.enricher_stats import EnricherStats

from .calls import (
    AnswerMapping,
    BatchCalls,
    Calls,
    CallsFactory,
    Output,
    ResponseMapping,
    SingleCalls,
    StoredResponses,
)
from .config import HttpEnricherConfig
from .dedup import Coalescer, LruCache
from .errors import is_retryable
from .request_budget import RequestBudget
from .sender import CallPacing, RequestSender

if TYPE_CHECKING:
    import aiohttp

    from spark_jobs.telemetry import RequestObserver

__all__ = ["AnswerMapping", "HttpEnricher", "Output", "StoredResponses"]


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
        calls: CallsFactory | None = None,
    ) -> None:
        """``stored``: answers kept across runs; ``request_budget``: what this enricher
        may send before it raises :class:`BudgetExhausted` instead of sending;
        ``answered``: the LRU cache to start from, keyed by ``request_keys`` (a
        resumed partition's replayed answers), instead of an empty one. ``answers``
        maps a body to the output instead of the ``response_fields`` paths, and
        ``pacing`` admits each call (both a model endpoint's: ``model_endpoint/``);
        ``calls`` builds how records reach the API instead of one request each or the
        config's batches (a model endpoint's embeddings, many inputs a request, or its
        batch mode: ``model_endpoint/``)."""
        if config.batch is not None and (stored is not None or request_budget is not None):
            raise ValueError("a response cache or a request budget does not work with batching")
        self.config = config
        self._method = config.method
        self._cache: LruCache[Output] | None = answered
        if answered is None and config.cache_size:
            self._cache = LruCache(config.cache_size)
        self._coalescer: Coalescer[Output] | None = Coalescer() if config.coalesce else None
        self._sender = RequestSender(config, request_budget)
        self._sender.pacing = pacing
        mapping = ResponseMapping(config, self._sender.redact)
        self._calls: Calls[Any]
        if calls is not None:
            self._calls = calls(config, self._sender, mapping, stored, answers)
        elif config.batch is None:
            self._calls = SingleCalls(config, self._sender, mapping, stored, answers)
        else:
            self._calls = BatchCalls(config, config.batch, self._sender, mapping)
        self.cache_hits = 0

    def __repr__(self) -> str:
        state = "open" if self._session is not None else "closed"
        return f"<HttpEnricher {self._method} {self._calls.target} ({state})>"

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def _session(self) -> aiohttp.ClientSession | None:
        return self._sender.session

    async def __aenter__(self) -> HttpEnricher:
        self._sender.open()
        self._calls.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._calls.close()
        await self._sender.close()

    # -- the async function -----------------------------------------------------------

    async def __call__(self, record: Mapping[str, Any]) -> Output:
        """The typed output fields for ``record``; raises an :class:`EnrichmentError`."""
        key, url, body = self._calls.keys(record)
        cache = self._cache
        if cache is not None:
            cached = cache.get(key)
            if cached is not None:
                self.cache_hits += 1
                return dict(cached)
        if self._coalescer is not None:
            return dict(await self._coalescer.run(key, self._fetch, key, url, body))
        output = await self._fetch(key, url, body)
        return dict(output) if cache is not None else output

    async def _fetch(self, key: Hashable, url: str | None, body: str | None) -> Output:
        output = await self._calls.fetch(key, url, body)
        if self._cache is not None:
            self._cache.put(key, output)
        return output

    def input_ended(self) -> None:
        """The partition's input has ended: from now on an attempt gone silent is sent
        again early, as a straggler (``stragglers.py``), with ``resend_stragglers``."""
        if self._sender.stragglers is not None:
            self._sender.stragglers.input_ended()

    # -- observability ----------------------------------------------------------------

    def observe_requests(self, observer: RequestObserver | None) -> None:
        """Time every request with ``observer`` (telemetry on); None leaves them untimed."""
        self._sender.observer = observer

    def recent_calls(self) -> dict[str, int]:
        """The last minute's answers by outcome (``call_outcomes.py``): progress lines."""
        return self._sender.outcomes.counts()

    @property
    def stats(self) -> EnricherStats:
        """Counters since the enricher was created."""
        sender = self._sender
        return EnricherStats(
            requests_made=sender.requests_made,
            responses_by_status=dict(sender.responses_by_status),
            retryable_errors=sender.retryable_errors,
            throttled=sender.throttled,
            cache_hits=self.cache_hits,
            calls_saved_by_coalescing=(
                self._coalescer.saved_calls if self._coalescer is not None else 0
            ),
            current_concurrency_limit=sender.limiter.limit,
            in_flight=sender.limiter.in_flight,
            concurrency_decreases=sender.limiter.decreases,
            rate_decreases=sender.rate.decreases,
            batches_sent=self._calls.batches_sent,
            hedges_sent=sender.hedges_sent,
            stragglers_resent=sender.stragglers_resent,
            retries_by_reason=dict(sender.retries_by_reason),
            response_cache_hits=self._calls.stored_hits,
        )
