"""The HTTP enricher: one record in, its typed output fields out, via one HTTP call.

``async with HttpEnricher(config) as enrich:`` opens one ``aiohttp.ClientSession`` for
the partition (connections are pooled and kept alive across records); ``await
enrich(record)`` is the async function the operator calls. Per call, in order:

1. fill the URL (and body) template; a missing field is a permanent failure;
2. answer from the LRU cache, or join an identical request already in flight;
3. otherwise, or once per batch, take a concurrency slot and a rate token (untimed:
   see ``asyncwait.untimed``), send under the attempt's own deadlines (``attempt.py``),
   hedged when configured (``hedging.py``);
4. map the status to a value or an error the retry predicate understands.

Retries are the operator's job (``default_retry_strategy``), so every attempt comes
back through here and pays its token and slot like a first call.
"""

from __future__ import annotations

import json
import logging
import time
import zlib
from collections import Counter
from collections.abc import Awaitable, Mapping
from types import TracebackType
from typing import Any, Protocol

import aiohttp

from spark_jobs.asyncwait import untimed

from .attempt import (
    ACCEPT_ENCODING,
    AttemptLimits,
    AttemptTimeout,
    BodyTooLarge,
    Reply,
    UnsupportedEncoding,
    send,
)
from .batching import Batcher
from .config import HttpEnricherConfig
from .dedup import Coalescer, LruCache
from .errors import (
    RETRYABLE_4XX,
    BudgetExhausted,
    ClientStatusError,
    EnrichmentError,
    InvalidResponseError,
    NotFoundError,
    PermanentError,
    ResponseTooLargeError,
    RetryableError,
    ServerError,
    ThrottledError,
    TransportError,
    is_retryable,
    parse_retry_after,
    snippet,
)
from .hedging import HedgeDelay, race
from .json_paths import CONVERTERS, ConversionError, compile_path, extract
from .rate_limit import AdaptiveConcurrency, TokenBucket
from .secrets import Secret, read_token
from .templates import FieldSource, UrlTemplate

logger = logging.getLogger(__name__)

_DNS_CACHE_S = 300
_KEEPALIVE_S = 30.0

Output = dict[str, Any]


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
        request_budget: int | None = None,
    ) -> None:
        """``stored``: answers kept across runs; ``request_budget``: requests this enricher
        may make before it raises :class:`BudgetExhausted` instead of sending."""
        if config.batch_size is not None and (stored is not None or request_budget is not None):
            raise ValueError("a response cache or a request budget does not work with batching")
        self.config = config
        self._stored = stored
        self._budget = request_budget
        self._method = config.method
        self._batching = config.batch_size is not None
        self._url = None if self._batching else config.compile_url()
        self._body = config.compile_body() if config.body_template is not None else None
        self._fields = [
            (name, spec.path, compile_path(spec.path), CONVERTERS[spec.type])
            for name, spec in config.response_fields.items()
        ]
        self._output_names = tuple(config.response_fields)
        self._cache: LruCache[Output] | None = (
            LruCache(config.cache_size) if config.cache_size else None
        )
        self._coalescer: Coalescer[Output] | None = Coalescer() if config.coalesce else None
        rate = config.rate_per_partition
        self._bucket = TokenBucket(rate) if rate is not None else None
        self._limiter = AdaptiveConcurrency(
            config.capacity, config.throttle_window, config.throttle_share
        )
        self._limits = AttemptLimits(
            first_byte=config.first_byte_timeout,
            stall=config.read_timeout,
            total=config.total_timeout,
            max_bytes=config.max_response_bytes,
        )
        self._hedge: HedgeDelay | None = None
        if config.hedge_after is not None:
            self._hedge = HedgeDelay(
                fixed_s=config.hedge_delay_s, percentile=config.hedge_percentile
            )
        self._batcher: Batcher[Any, Output] | None = None
        self._results_path = compile_path(config.batch_results_path)
        self._key_source = FieldSource("key_field", None)
        self._session: aiohttp.ClientSession | None = None
        self._token: Secret | None = None
        self._header_secrets: list[Secret] = []
        self._auth_warned = False
        self.requests_made = 0
        self.responses_by_status: Counter[int] = Counter()
        self.retryable_errors = 0
        self.throttled = 0
        self.cache_hits = 0
        self.batches_sent = 0
        self.hedges_sent = 0
        self.stored_hits = 0

    def __repr__(self) -> str:
        state = "open" if self._session is not None else "closed"
        target = self.config.batch_url_template if self._batching else self.config.url_template
        return f"<HttpEnricher {self._method} {target} ({state})>"

    # -- lifecycle ----------------------------------------------------------------------

    async def __aenter__(self) -> HttpEnricher:
        if self._session is not None:
            raise RuntimeError("this HttpEnricher is already open")
        config = self.config
        self._token = read_token(config.token_env, config.token_file)
        headers = dict(config.headers)
        if self._token is not None:
            headers["Authorization"] = f"Bearer {self._token.reveal()}"
        for name, variable in config.secret_headers.items():
            secret = read_token(variable, None)
            assert secret is not None
            self._header_secrets.append(secret)
            headers[name] = secret.reveal()
        if self._body is not None or self._batching:
            headers.setdefault("Content-Type", "application/json")
        headers["Accept-Encoding"] = ACCEPT_ENCODING  # what attempt.py can decode
        connector = aiohttp.TCPConnector(
            limit=config.capacity,
            limit_per_host=config.capacity,
            ttl_dns_cache=_DNS_CACHE_S,
            keepalive_timeout=_KEEPALIVE_S,
        )
        # Only the connect deadline is aiohttp's; the others are per phase (attempt.py).
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=config.connect_timeout)
        session = aiohttp.ClientSession(
            connector=connector, timeout=timeout, headers=headers, auto_decompress=False
        )
        # aiohttp silently resends an idempotent request once when a kept-alive
        # connection turns out dead. That call would bypass the rate limit and the
        # counters, so it is switched off (as aiohttp's own test client does); the
        # operator's retry strategy retries instead, visibly. The attribute is
        # private: if a future aiohttp drops it, counts would be off on disconnects,
        # which tests/integration/test_http_enricher.py detects.
        if hasattr(session, "_retry_connection"):
            session._retry_connection = False
        self._session = session
        if self._batching:
            assert config.batch_size is not None
            self._batcher = Batcher(self._send_batch, config.batch_size, config.batch_max_wait_s)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._batcher is not None:
            await self._batcher.aclose()
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._token = None
        self._header_secrets = []

    # -- the async function -----------------------------------------------------------

    async def __call__(self, record: Mapping[str, Any]) -> Output:
        """The typed output fields for ``record``; raises an :class:`EnrichmentError`."""
        if self._batching:
            key: Any = self._batch_key(record)
        else:
            assert self._url is not None
            url = self._url.fill(record)
            if self._body is None:
                body = None
                key = url if self._method == "GET" else (self._method, url)
            else:
                body = json.dumps(self._body.fill(record), separators=(",", ":"), default=str)
                key = (self._method, url, body)
        cache = self._cache
        if cache is not None:
            cached = cache.get(key)
            if cached is not None:
                self.cache_hits += 1
                return dict(cached)
        if self._coalescer is not None:
            if self._batching:
                output = await self._coalescer.run(key, self._fetch_batched, key)
            else:
                output = await self._coalescer.run(key, self._fetch, key, url, body)
            return dict(output)
        if self._batching:
            output = await self._fetch_batched(key)
        else:
            output = await self._fetch(key, url, body)
        return dict(output) if cache is not None else output

    async def _fetch(self, key: Any, url: str, body: str | None) -> Output:
        stored = self._stored
        payload = stored.get(self._method, url, body) if stored is not None else None
        if payload is not None:
            self.stored_hits += 1
            output = self._output(self._parse(payload, url), url)
        else:
            status, payload = await self._request(self._method, url, body, allow_404=True)
            if status == 404:
                output = self._not_found(f"HTTP 404 from {self._method} {url}")
            else:
                output = self._output(self._parse(payload, url), url)
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
            raise NotFoundError(self._redact(message))
        return dict.fromkeys(self._output_names)

    def _output(self, document: Any, where: str) -> Output:
        output = {}
        for name, path, steps, convert in self._fields:
            value = extract(document, steps)
            if value is not None:
                try:
                    value = convert(value)
                except ConversionError as exc:
                    raise InvalidResponseError(
                        self._redact(f"response field {name} ({path}) from {where}: {exc}")
                    ) from None
            output[name] = value
        return output

    def _parse(self, payload: bytes, url: str) -> Any:
        try:
            return json.loads(payload)
        except ValueError:
            raise InvalidResponseError(
                self._redact(f"invalid JSON from {self._method} {url}: {snippet(payload)!r}")
            ) from None
        except RecursionError:
            raise InvalidResponseError(
                self._redact(f"JSON from {self._method} {url} is nested too deeply to parse")
            ) from None

    # -- batching -----------------------------------------------------------------------

    def _batch_key(self, record: Mapping[str, Any]) -> str | int:
        key_field = self.config.key_field
        assert key_field is not None
        key = self._key_source.value(record, key_field)
        if isinstance(key, bool) or not isinstance(key, str | int):
            raise PermanentError(
                f"key_field {key_field!r} must hold a string or an integer to batch on, "
                f"got {type(key).__name__}"
            )
        return key

    async def _send_batch(self, keys: list[Any]) -> dict[Any, Output | Exception]:
        config = self.config
        assert config.batch_url_template is not None
        url = UrlTemplate(config.batch_url_template, "batch_url_template").fill({})
        body = json.dumps({config.batch_request_key: keys}, separators=(",", ":"))
        self.batches_sent += 1
        _, payload = await self._request("POST", url, body, allow_404=False)
        items = extract(self._parse(payload, url), self._results_path)
        if not isinstance(items, list):
            raise InvalidResponseError(
                self._redact(
                    f"no result list at {config.batch_results_path} in the response from "
                    f"POST {url}: {snippet(payload)!r}"
                )
            )
        id_field, error_field = config.batch_result_id_field, config.batch_error_field
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

    # -- one HTTP request -----------------------------------------------------------------

    async def _request(
        self, method: str, url: str, body: str | None, *, allow_404: bool
    ) -> tuple[int, bytes]:
        """One call's answer as (status, body), hedged when configured; or an error."""
        hedge = self._hedge
        delay = hedge.current() if hedge is not None else None
        if delay is None:
            return await self._send(method, url, body, allow_404=allow_404)
        return await race(
            lambda: self._send(method, url, body, allow_404=allow_404),
            lambda: self._send_hedge(method, url, body, allow_404=allow_404),
            delay,
        )

    def _send_hedge(
        self, method: str, url: str, body: str | None, *, allow_404: bool
    ) -> Awaitable[tuple[int, bytes]] | None:
        """The hedged request, if a concurrency slot is free right now (never waits) and
        the request budget has room for it."""
        if self._budget is not None and self.requests_made >= self._budget:
            return None
        ticket = self._limiter.try_acquire()
        if ticket is None:
            return None
        self.hedges_sent += 1
        return self._send(method, url, body, allow_404=allow_404, ticket=ticket)

    async def _send(
        self,
        method: str,
        url: str,
        body: str | None,
        *,
        allow_404: bool,
        ticket: int | None = None,
    ) -> tuple[int, bytes]:
        """Send once, within the concurrency and rate limits; (status, body) or an error.

        Waiting for a slot or a rate token is ``untimed``: other records' stalled or
        throttled requests hold those, so the wait must not eat this record's timeout.
        """
        session = self._session
        if session is None:
            raise RuntimeError("use the enricher inside 'async with HttpEnricher(...)'")
        limiter = self._limiter
        if ticket is None:
            ticket = limiter.try_acquire()
            if ticket is None:
                async with untimed():
                    ticket = await limiter.acquire()
        success = throttled = False
        try:
            if self._bucket is not None:
                async with untimed():
                    await self._bucket.acquire()
            if self._budget is not None and self.requests_made >= self._budget:
                raise BudgetExhausted(f"request budget of {self._budget} spent")
            self.requests_made += 1
            started = time.monotonic()
            reply = await self._attempt(session, method, url, body)
            status = reply.status
            self.responses_by_status[status] += 1
            if 200 <= status < 300 or (status == 404 and allow_404):
                success = True
                if self._hedge is not None:
                    self._hedge.observe(time.monotonic() - started)
                return status, reply.payload
            raise self._status_error(method, url, status, reply)
        except ThrottledError as error:
            throttled = error.status == 429
            raise
        finally:
            limiter.release(ticket, success=success, throttled=throttled)

    async def _attempt(
        self, session: aiohttp.ClientSession, method: str, url: str, body: str | None
    ) -> Reply:
        """One attempt; every way it can fail below HTTP becomes an EnrichmentError."""
        try:
            return await send(session, method, url, body, self._limits)
        except BodyTooLarge as exc:
            raise ResponseTooLargeError(self._redact(f"{method} {url}: body {exc}")) from None
        except UnsupportedEncoding as exc:
            raise InvalidResponseError(self._redact(f"{method} {url}: {exc}")) from None
        except (aiohttp.ClientError, AttemptTimeout, zlib.error) as exc:
            raise self._transport_error(method, url, exc) from None

    def _status_error(self, method: str, url: str, status: int, reply: Reply) -> EnrichmentError:
        message = self._redact(f"HTTP {status} from {method} {url}: {snippet(reply.payload)!r}")
        if status == 429 or status == 503:
            if status == 429:
                self.throttled += 1
            retry_after = parse_retry_after(reply.retry_after)
            return self._retryable(ThrottledError(message, status=status, retry_after=retry_after))
        if status >= 500 or status in RETRYABLE_4XX:
            return self._retryable(ServerError(message, status=status))
        if status in (401, 403) and not self._auth_warned:
            self._auth_warned = True  # once: every record would repeat it
            source = self.config.token_env or self.config.token_file or "no token configured"
            logger.warning("%s; check the bearer token source (%s)", message, source)
        return ClientStatusError(message, status=status)

    def _transport_error(self, method: str, url: str, exc: Exception) -> EnrichmentError:
        """No usable HTTP answer. All of it is transient but a URL aiohttp cannot send:
        resets, refusals, empty replies, broken status lines or chunks, truncated or
        corrupt bodies and passed deadlines all have the next attempt as their cure."""
        if isinstance(exc, AttemptTimeout):
            reason = str(exc)
        elif isinstance(exc, aiohttp.ConnectionTimeoutError):
            reason = "connect timeout"
        elif isinstance(exc, aiohttp.ClientResponseError):  # from the parser, not a status
            reason = f"invalid HTTP response: {exc.message}"
        elif isinstance(exc, zlib.error):
            reason = f"corrupt compressed body: {exc}"
        else:
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        message = self._redact(f"{method} {url}: {reason}")
        if isinstance(exc, aiohttp.InvalidURL):
            return PermanentError(message)
        return self._retryable(TransportError(message))

    def _retryable(self, error: RetryableError) -> RetryableError:
        self.retryable_errors += 1
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("retryable: %s", error)
        return error

    def _redact(self, text: str) -> str:
        for secret in (self._token, *self._header_secrets):
            if secret is not None:
                text = secret.redact(text)
        return text

    # -- observability ----------------------------------------------------------------

    @property
    def stats(self) -> dict[str, Any]:
        """Counters since the enricher was created, as plain (JSON-ready) data."""
        return {
            "requests_made": self.requests_made,
            "responses_by_status": dict(self.responses_by_status),
            "retryable_errors": self.retryable_errors,
            "throttled": self.throttled,
            "cache_hits": self.cache_hits,
            "calls_saved_by_coalescing": (
                self._coalescer.saved_calls if self._coalescer is not None else 0
            ),
            "current_concurrency_limit": self._limiter.limit,
            "in_flight": self._limiter.in_flight,
            "concurrency_decreases": self._limiter.decreases,
            "batches_sent": self.batches_sent,
            "hedges_sent": self.hedges_sent,
            "response_cache_hits": self.stored_hits,
        }
