"""One HTTP request of the enricher: within the concurrency and rate limits and the
request budget, under the attempt's own deadlines (``attempt.py``), hedged when
configured (``hedging.py``), its status or failure mapped to an error the retry
predicate understands; ``CallPacing``, what a model endpoint keeps around each call.
Counts what it sends; never names a secret."""

from __future__ import annotations

import dataclasses
import logging
import time
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp

from spark_jobs.asyncwait import untimed

from .account_errors import account_error, is_account_level, provider_error
from .attempt import AttemptLimits, AttemptTimeout, BodyTooLarge, Reply, UnsupportedEncoding, send
from .call_outcomes import TRANSPORT, CallOutcomes, outcome_name
from .concurrency import concurrency_limit
from .config import HttpEnricherConfig
from .errors import (
    RETRYABLE_4XX,
    ClientStatusError,
    EnrichmentError,
    InvalidResponseError,
    PermanentError,
    ResponseTooLargeError,
    RetryableError,
    ServerError,
    ThrottledError,
    TransportError,
    snippet,
)
from .hedging import HedgeDelay, race
from .rate_control import RateController
from .rate_headers import QuotaHint
from .rate_sharing import open_neighbours
from .redirects import REDIRECT_STATUSES, Hop, RedirectRefused, next_hop
from .request_budget import RequestBudget
from .secrets import Secret
from .session import open_session
from .stragglers import StragglerWatch

if TYPE_CHECKING:
    from spark_jobs.telemetry import RequestObserver

logger = logging.getLogger(__name__)


class CallPacing(Protocol):
    """A limit beyond the request rate, kept around each call. A model endpoint limits
    tokens per minute and bills by token, and a call's tokens are known only from its
    answer: so the pacing admits each call before it takes its rate slot (reserving an
    estimate, waiting for room) and the reply settles it (``model_endpoint/pacing.py``;
    other APIs have none)."""

    async def admit(self, body: str | None) -> Any:
        """Reserve what the call with ``body`` may use; may wait, or raise
        ``BudgetExhausted`` (the call is then not sent)."""

    def settle(self, admitted: Any, reply: Reply | None, rate: RateController) -> None:
        """The call's ``reply`` (None: it got no answer) settles what ``admit`` reserved;
        its headers may steer ``rate``."""


@dataclass(frozen=True)
class _Channel:
    """What one call goes over: the enricher's session, and its attempts' limits (whose
    body cap grows with the records' answers the call asks for)."""

    session: aiohttp.ClientSession
    limits: AttemptLimits


class RequestSender:
    """Sends the requests of one enricher over its session, open between :meth:`open`
    and :meth:`close` (``HttpEnricher``'s ``async with``)."""

    def __init__(self, config: HttpEnricherConfig, request_budget: RequestBudget | None) -> None:
        self.config = config
        self.pacing: CallPacing | None = None  # admits and settles each call when set
        self.session: aiohttp.ClientSession | None = None
        self._secrets: list[Secret] = []
        self._budget = request_budget
        self.rate = RateController(
            config.requests_per_second,
            window=config.throttle_window,
            share=config.throttle_share,
            neighbours=open_neighbours(config),
        )
        self.limiter = concurrency_limit(config.capacity, config.concurrency)
        self._limits = AttemptLimits(
            first_byte=config.first_byte_timeout,
            stall=config.read_timeout,
            total=config.total_timeout,
            max_bytes=config.max_response_bytes,
        )
        # Off unless asked for: no watch at all, so an attempt costs nothing for it.
        self.stragglers = StragglerWatch() if config.resend_stragglers else None
        self._hedge: HedgeDelay | None = None
        if config.hedge_after is not None:
            self._hedge = HedgeDelay(
                fixed_s=config.hedge_delay_s, percentile=config.hedge_percentile
            )
        self._auth_warned = False
        self.requests_made = 0
        self.responses_by_status: Counter[int] = Counter()
        self.retryable_errors = 0
        self.throttled = 0
        self.hedges_sent = 0
        self.stragglers_resent = 0
        self.retries_by_reason: Counter[str] = Counter()
        self.outcomes = CallOutcomes()  # the last minute's answers, for progress lines
        self.observer: RequestObserver | None = None  # set when telemetry is on

    def open(self) -> None:
        if self.session is not None:
            raise RuntimeError("this HttpEnricher is already open")
        self.session, self._secrets = open_session(self.config)

    async def close(self) -> None:
        if self.stragglers is not None:
            await self.stragglers.aclose()
        self.rate.leave()
        if self.session is not None:
            await self.session.close()
            self.session = None
        self._secrets = []

    def request(
        self, method: str, url: str, body: str | None, *, allow_404: bool, answers: int = 1
    ) -> Awaitable[tuple[int, bytes]]:
        """One call's answer as (status, body), hedged when configured; or an error.
        A call that asks for ``answers`` records' answers at once (many embeddings
        inputs) may be answered that many times ``max_response_bytes``: each record's
        answer is capped as when asked alone.
        (The awaitable of the send or the race: no coroutine frame of its own.)"""
        limits = self._limits
        if answers > 1:
            limits = dataclasses.replace(limits, max_bytes=limits.max_bytes * answers)
        hedge = self._hedge
        delay = hedge.current() if hedge is not None else None
        if delay is None:
            return self._send(method, url, body, limits, allow_404=allow_404)
        first = partial(self._send, method, url, body, limits, allow_404=allow_404, paced=True)
        second = partial(self._send_hedge, method, url, body, limits, allow_404=allow_404)
        return self._hedged(first, second, delay)

    async def _hedged(
        self,
        first: Callable[[], Awaitable[tuple[int, bytes]]],
        hedge: Callable[[], Awaitable[tuple[int, bytes]] | None],
        delay: float,
    ) -> tuple[int, bytes]:
        """The race starts once the first request has its rate slot: a wait for one is
        the pacing's, not a slow answer, and must not send a hedge."""
        await self._rate_slot()
        return await race(first, hedge, delay)

    async def _rate_slot(self) -> None:
        """Wait (``untimed``) for the rate controller's next send slot."""
        wait = self.rate.reserve()
        if wait > 0:
            async with untimed():
                await self.rate.wait_for_slot(wait)

    def redact(self, text: str) -> str:
        return Secret.redact_all(text, self._secrets)

    def _send_hedge(
        self, method: str, url: str, body: str | None, limits: AttemptLimits, *, allow_404: bool
    ) -> Awaitable[tuple[int, bytes]] | None:
        """The hedged request, if a concurrency slot and a rate slot are free right now
        (it never waits) and the request budget has room for it."""
        if self._budget is not None and self._budget.left == 0:
            return None
        if not self.limiter.try_acquire():
            return None
        if not self.rate.try_reserve():
            self.limiter.release()
            return None
        self.hedges_sent += 1
        return self._send(method, url, body, limits, allow_404=allow_404, acquired=True, paced=True)

    async def _send(
        self,
        method: str,
        url: str,
        body: str | None,
        limits: AttemptLimits,
        *,
        allow_404: bool,
        acquired: bool = False,
        paced: bool = False,
    ) -> tuple[int, bytes]:
        """Send once, within the concurrency and rate limits; (status, body) or an error.

        Waiting for a slot or a rate token is ``untimed``: other records' stalled or
        throttled requests hold those, so the wait must not eat this record's timeout.
        Each answer's throttling and rate-limit headers steer the rate controller, and
        its latency the concurrency limit.
        """
        session = self.session
        if session is None:
            raise RuntimeError("use the enricher inside 'async with HttpEnricher(...)'")
        limiter = self.limiter
        if not acquired and not limiter.try_acquire():
            async with untimed():
                await limiter.acquire()
        took: float | None = None  # the answer's latency, once there is a usable one
        started, hint = 0.0, None
        try:
            # A hedged first request took its rate slot before the race.
            channel = _Channel(session, limits)
            reply, started, hint = await self._call(channel, method, url, body, paced)
            hops = 0
            while reply.status in REDIRECT_STATUSES:  # followed only as a call of its own
                hop = self._redirect(method, url, body, reply, hops)
                self.rate.accepted()
                method, url, body, hops = hop.method, hop.url, hop.body, hops + 1
                reply, started, hint = await self._call(channel, method, url, body, False)
            status = reply.status
            if 200 <= status < 300 or (status == 404 and allow_404):
                self.outcomes.add(outcome_name(status))
                self.rate.accepted()
                took = time.monotonic() - started
                if self.stragglers is not None:
                    self.stragglers.answered(took)
                if self._hedge is not None:
                    self._hedge.observe(took)
                return status, reply.payload
            raise self._status_error(method, url, status, reply)
        except ThrottledError as error:
            self.rate.throttled(
                error.retry_after, started, limited=hint is not None and hint.limits
            )
            raise
        finally:
            limiter.release(took)

    async def _call(
        self, channel: _Channel, method: str, url: str, body: str | None, paced: bool
    ) -> tuple[Reply, float, QuotaHint | None]:
        """One paid call: its rate slot (taken already when ``paced``), a request of the
        budget, the attempt; (reply, when it was sent, its rate-limit headers). A
        ``pacing`` admits the call first (a wait for its tokens must not hold a rate
        slot), and its reply (None: no answer) settles it."""
        pacing = self.pacing
        if pacing is None:
            return await self._paid(channel, method, url, body, paced)
        admitted, reply = await pacing.admit(body), None
        try:
            reply, started, hint = await self._paid(channel, method, url, body, paced)
        finally:
            pacing.settle(admitted, reply, self.rate)
        return reply, started, hint

    async def _paid(
        self, channel: _Channel, method: str, url: str, body: str | None, paced: bool
    ) -> tuple[Reply, float, QuotaHint | None]:
        rate = self.rate
        if not paced:
            wait = rate.reserve()
            if wait > 0:
                async with untimed():
                    await rate.wait_for_slot(wait)
        if self._budget is not None:
            await self._budget.spend()
        self.requests_made += 1
        rate.sending()
        started = time.monotonic()
        observer = self.observer
        if observer is None:
            reply = await self._attempt(channel, method, url, body)
        else:
            reply = await observer.timed(method, self._attempt(channel, method, url, body))
        hint = reply.quota_hint
        if hint is not None:
            rate.observe_quota(hint, started)
        self.responses_by_status[reply.status] += 1
        return reply, started, hint

    def _redirect(self, method: str, url: str, body: str | None, reply: Reply, hops: int) -> Hop:
        """The next hop of a redirect ``follow_redirects`` allows; else a permanent error
        saying where it pointed (no query: it may carry a secret)."""
        location = reply.headers.get("Location")
        try:
            policy = self.config.follow_redirects
            return next_hop(policy, method, url, body, reply.status, location, hops)
        except RedirectRefused as refused:
            message = self.redact(f"HTTP {reply.status} from {method} {url}: {refused}")
            raise ClientStatusError(message, status=reply.status) from None

    async def _attempt(self, channel: _Channel, method: str, url: str, body: str | None) -> Reply:
        """One attempt; every way it can fail below HTTP becomes an EnrichmentError."""
        try:
            return await send(channel.session, method, url, body, channel.limits, self.stragglers)
        except BodyTooLarge as exc:
            raise ResponseTooLargeError(self.redact(f"{method} {url}: body {exc}")) from None
        except UnsupportedEncoding as exc:
            raise InvalidResponseError(self.redact(f"{method} {url}: {exc}")) from None
        except (aiohttp.ClientError, AttemptTimeout, zlib.error) as exc:
            raise self._transport_error(method, url, exc) from None

    def _status_error(self, method: str, url: str, status: int, reply: Reply) -> EnrichmentError:
        if status in (401, 403) and not self._auth_warned:
            self._auth_warned = True  # once: every record would repeat it
            source = self.config.token_env or self.config.token_file or "no token configured"
            refused = self.redact(f"HTTP {status} from {method} {url}")
            logger.warning("%s; check the bearer token source (%s)", refused, source)
        provider = provider_error(reply.payload)
        self.outcomes.add(self.redact(outcome_name(status, provider)))  # a code may echo one
        if is_account_level(status, provider):  # before 429: a spent quota is no throttle
            return account_error(status, provider, f"{method} {url}", self.redact)
        if status in (401, 403):  # its body tends to quote the credentials back: not shown
            message = self.redact(f"HTTP {status} from {method} {url} (body not shown)")
        else:
            body = snippet(reply.payload, self.redact)
            message = self.redact(f"HTTP {status} from {method} {url}: {body!r}")
        retry_after = reply.retry_delay
        if status == 429 or (status == 503 and retry_after is not None):
            if status == 429:
                self.throttled += 1
            return self._retryable(ThrottledError(message, status=status, retry_after=retry_after))
        if status >= 500 or status in RETRYABLE_4XX:
            return self._retryable(ServerError(message, status=status))
        return ClientStatusError(message, status=status)

    def _transport_error(self, method: str, url: str, exc: Exception) -> EnrichmentError:
        """No usable HTTP answer. All of it is transient but a URL aiohttp cannot send:
        resets, refusals, empty replies, broken status lines or chunks, truncated or
        corrupt bodies and passed deadlines all have the next attempt as their cure."""
        if isinstance(exc, AttemptTimeout):
            reason = str(exc)
            self.stragglers_resent += exc.phase == "straggler"
        elif isinstance(exc, aiohttp.ConnectionTimeoutError):
            reason = "connect timeout"
        elif isinstance(exc, aiohttp.ClientResponseError):  # from the parser, not a status
            reason = f"invalid HTTP response: {exc.message}"
        elif isinstance(exc, zlib.error):
            reason = f"corrupt compressed body: {exc}"
        else:
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        message = self.redact(f"{method} {url}: {reason}")
        if isinstance(exc, aiohttp.InvalidURL):
            return PermanentError(message)
        self.outcomes.add(TRANSPORT)
        return self._retryable(TransportError(message))

    def _retryable(self, error: RetryableError) -> RetryableError:
        self.retryable_errors += 1
        self.retries_by_reason[type(error).__name__] += 1
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("retryable: %s", error)
        return error
