"""Retry strategies: when a failed (or unwanted) call is tried again, and after how long.

Mirrors Flink's ``AsyncRetryStrategies`` (no retry, fixed delay, exponential backoff) with
predicates on the exception and on the result. ``max_attempts`` counts every call, the
first included. An exception may carry ``retry_after`` (seconds, e.g. from an HTTP
``Retry-After`` header): the strategy then waits at least that long, whatever its backoff.

Beyond Flink, ``is_throttled(error)`` marks a call the server refused to *work on* (HTTP
429): it is retried after its wait without spending an attempt, since the record did
nothing wrong and the client's rate control is what has to change. Only the operator's
``timeout`` bounds such a record; without one, it retries until the server takes it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


def _retry_every_exception(_error: BaseException) -> bool:
    return True


def _accept_every_result(_value: Any) -> bool:
    return False


def _never_throttled(_error: BaseException) -> bool:
    return False


@dataclass(frozen=True)
class RetryStrategy:
    """How many calls a record may take and how long to wait between them.

    Build one with :meth:`no_retry`, :meth:`fixed_delay` or :meth:`exponential_backoff`.
    ``retry_on_exception(error)`` says whether an exception is worth another call;
    ``retry_on_result(value)`` says whether a successful value should be fetched again
    (e.g. an empty result). A result that still matches when the budget is spent is
    emitted as it is: it is a valid answer, not an error. ``is_throttled(error)`` says
    whether a retryable exception is a refusal to serve that costs no attempt.
    """

    max_attempts: int = 1
    initial_delay: float = 0.0
    multiplier: float = 1.0
    max_delay: float = 0.0
    jitter: float = 0.0
    retry_on_exception: Callable[[BaseException], bool] = _retry_every_exception
    retry_on_result: Callable[[Any], bool] = _accept_every_result
    is_throttled: Callable[[BaseException], bool] = _never_throttled
    _random: random.Random = field(default_factory=random.Random, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        for name in ("initial_delay", "max_delay", "jitter"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.multiplier < 1.0:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter must be within [0, 1], got {self.jitter}")

    @classmethod
    def no_retry(cls) -> RetryStrategy:
        """One call per record; any exception makes it a failure."""
        return cls(max_attempts=1)

    @classmethod
    def fixed_delay(
        cls,
        max_attempts: int,
        delay: float,
        *,
        retry_on_exception: Callable[[BaseException], bool] = _retry_every_exception,
        retry_on_result: Callable[[Any], bool] = _accept_every_result,
    ) -> RetryStrategy:
        """Up to ``max_attempts`` calls, ``delay`` seconds apart."""
        return cls(
            max_attempts=max_attempts,
            initial_delay=delay,
            max_delay=delay,
            retry_on_exception=retry_on_exception,
            retry_on_result=retry_on_result,
        )

    @classmethod
    def exponential_backoff(
        cls,
        max_attempts: int,
        initial_delay: float,
        max_delay: float,
        *,
        multiplier: float = 2.0,
        jitter: float = 0.5,
        retry_on_exception: Callable[[BaseException], bool] = _retry_every_exception,
        retry_on_result: Callable[[Any], bool] = _accept_every_result,
        is_throttled: Callable[[BaseException], bool] = _never_throttled,
        seed: int | None = None,
    ) -> RetryStrategy:
        """Delays ``initial * multiplier**n`` capped at ``max_delay``, each shortened by a
        random fraction up to ``jitter`` so that many records failing together do not
        retry in lock-step."""
        return cls(
            max_attempts=max_attempts,
            initial_delay=initial_delay,
            multiplier=multiplier,
            max_delay=max_delay,
            jitter=jitter,
            retry_on_exception=retry_on_exception,
            retry_on_result=retry_on_result,
            is_throttled=is_throttled,
            _random=random.Random(seed),
        )

    def backoff(self, attempts_done: int) -> float:
        """The wait after the ``attempts_done``-th call (1-based) failed."""
        delay = min(self.initial_delay * self.multiplier ** (attempts_done - 1), self.max_delay)
        if self.jitter:
            delay *= 1.0 - self.jitter * self._random.random()
        return delay

    def spends_attempt(self, error: BaseException) -> bool:
        """Whether a call that raised ``error`` counts against ``max_attempts``."""
        return not (self.retry_on_exception(error) and self.is_throttled(error))

    def delay_after_exception(self, attempts_done: int, error: BaseException) -> float | None:
        """Seconds to wait before the next call, or ``None`` when the record has failed.

        For a throttled call (see :meth:`spends_attempt`) ``attempts_done`` is the run of
        throttled calls in a row instead, which only lengthens the backoff.
        """
        if not self.retry_on_exception(error):
            return None
        if attempts_done >= self.max_attempts and not self.is_throttled(error):
            return None
        retry_after = getattr(error, "retry_after", None)
        delay = self.backoff(attempts_done)
        return max(delay, float(retry_after)) if retry_after is not None else delay

    def delay_after_result(self, attempts_done: int, value: Any) -> float | None:
        """Seconds to wait before calling again for a result the predicate rejects."""
        if attempts_done >= self.max_attempts or not self.retry_on_result(value):
            return None
        return self.backoff(attempts_done)
