"""What can go wrong when enriching one record, split by whether trying again can help.

The async wait operator decides about retries from the exception alone (its
``RetryStrategy.retry_on_exception`` predicate and the ``retry_after`` attribute), so
every failure the enricher raises says in its type whether it is worth another call.
Messages are built by the enricher from status, method, URL and a short body snippet
(none for 401 and 403, whose bodies tend to quote the credentials back), or for an
account-level answer from the provider's code and message (``account_errors.py``); they
never include request headers, which is where the bearer token travels.
"""

from __future__ import annotations

from collections.abc import Callable

import aiohttp

from spark_jobs.asyncwait import RetryStrategy

#: Longest piece of a response body quoted in an error message.
SNIPPET_CHARS = 200
#: Client-error statuses that still invite another try: 408 Request Timeout, 425 Too Early.
RETRYABLE_4XX = frozenset({408, 425})


class EnrichmentError(Exception):
    """Base class of every error the HTTP enricher raises for a record."""


class RetryableError(EnrichmentError):
    """Another call may succeed: throttling, outage, server error, broken connection.

    ``retry_after`` (seconds) is the server's minimum wait, honoured by ``RetryStrategy``.
    """

    def __init__(
        self, message: str, *, status: int | None = None, retry_after: float | None = None
    ):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class ThrottledError(RetryableError):
    """HTTP 429, or 503 with ``Retry-After``: the server asks the client to slow down or
    come back later. It refused to work on the record, so the retry spends no attempt
    (:func:`is_throttled`); the record's timeout alone bounds it.

    A 503 without ``Retry-After`` is a :class:`ServerError` instead: nothing tells an
    overloaded server from a broken one, and a free retry would let a dead upstream hold
    every record until its timeout rather than its attempts.
    """


class ServerError(RetryableError):
    """Any other HTTP 5xx, or 408/425: the server could not answer this time."""


class TransportError(RetryableError):
    """No usable HTTP answer: refused, reset, empty reply, broken status line or chunk,
    truncated or corrupt body, or an attempt deadline passed."""


class PermanentError(EnrichmentError):
    """Another identical call would fail the same way; the record is a failure."""


class ClientStatusError(PermanentError):
    """HTTP 4xx other than 404 (per ``not_found``), 408, 425 and 429: e.g. 400, 403, 422;
    or a 3xx redirect that is not followed (``follow_redirects``)."""

    def __init__(self, message: str, *, status: int):
        super().__init__(message)
        self.status = status


class AccountError(PermanentError):
    """The provider refused the account, not the record: no credit, a spent billing or
    spend limit, refused credentials, an unknown model or deployment (``account_errors.py``
    lists the answers). Every other call would get the same answer, so it is never
    retried, not even as a throttle, and it stops the partition at once
    (``partition_runner/systemic.py``). ``code`` is the provider's (None for a bare 401)."""

    def __init__(self, message: str, *, status: int, code: str | None):
        super().__init__(message)
        self.status = status
        self.code = code


class NotFoundError(PermanentError):
    """HTTP 404 (or a batch item marked missing) with ``not_found="fail"``."""


class InvalidResponseError(PermanentError):
    """The body is not JSON, or a response field cannot be converted to its type."""


class ResponseTooLargeError(PermanentError):
    """The response body passed ``max_response_bytes`` (after decompression)."""


class MissingFieldError(PermanentError):
    """A URL or body template names a field the record does not have."""


class FieldValueError(PermanentError):
    """A template's field holds a value that cannot be sent as asked: a list, struct, map
    or bytes value where text is wanted (a model's prompt, ``{field!s}``), or a NaN or an
    infinity in a JSON body (``templates.py``)."""


class HeldForNextRun(EnrichmentError):
    """The record's call cannot end in this run and has not failed: neither retryable
    nor permanent, the partition runner keeps the record queued for the next run
    (``partition_runner/budget.py``)."""


class BudgetExhausted(HeldForNextRun):
    """The run's request budget (``--max-requests``) is spent: the request was not sent.

    The partition runner also stops taking input and lets the calls already sent finish
    (they are paid for).
    """


class BatchRunning(HeldForNextRun):
    """The record's request is a row of a provider batch that is still running, and the
    run detaches from its batches (``--detach-batches``): a later run reads the row."""


def is_retryable(error: BaseException) -> bool:
    """The ``retry_on_exception`` predicate for the operator's ``RetryStrategy``.

    Besides the enricher's own errors, raw aiohttp connection errors and timeouts count
    as retryable, so a user function calling aiohttp directly can share the predicate.
    """
    if isinstance(error, EnrichmentError):
        return isinstance(error, RetryableError)
    return isinstance(error, aiohttp.ClientConnectionError | TimeoutError | ConnectionError)


def is_throttled(error: BaseException) -> bool:
    """The ``is_throttled`` predicate: a throttled call spends none of the attempts."""
    return isinstance(error, ThrottledError)


def default_retry_strategy(
    max_attempts: int = 5, initial_delay: float = 0.2, max_delay: float = 10.0
) -> RetryStrategy:
    """Exponential backoff with jitter, retrying only what :func:`is_retryable` accepts.

    A ``Retry-After`` from the server lengthens a wait, never shortens it; a throttled
    call is retried without spending an attempt.
    """
    return RetryStrategy.exponential_backoff(
        max_attempts,
        initial_delay,
        max_delay,
        retry_on_exception=is_retryable,
        is_throttled=is_throttled,
    )


def snippet(body: bytes, redact: Callable[[str], str]) -> str:
    """The start of a response body for an error message, at most ``SNIPPET_CHARS`` long,
    ``redact``-ed before it is cut (a cut through a secret would leave its start)."""
    text = redact(body[: SNIPPET_CHARS * 4].decode("utf-8", errors="replace"))
    text = " ".join(text.split())
    return text if len(text) <= SNIPPET_CHARS else text[: SNIPPET_CHARS - 3] + "..."
