"""Retryable or not, Retry-After parsing, body snippets, the default retry strategy."""

import email.utils

import aiohttp
import pytest

from spark_jobs.enrichers import (
    ClientStatusError,
    InvalidResponseError,
    MissingFieldError,
    NotFoundError,
    ServerError,
    ThrottledError,
    TransportError,
    default_retry_strategy,
    is_retryable,
    parse_retry_after,
)
from spark_jobs.enrichers.errors import SNIPPET_CHARS, snippet


@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        (ThrottledError("429", status=429, retry_after=1), True),
        (ServerError("500", status=500), True),
        (TransportError("reset"), True),
        (ClientStatusError("400", status=400), False),
        (NotFoundError("404"), False),
        (InvalidResponseError("bad json"), False),
        (MissingFieldError("no id"), False),
        (aiohttp.ServerDisconnectedError(), True),
        (TimeoutError(), True),
        (ConnectionResetError(), True),
        (ValueError("a bug"), False),
        (KeyError("a bug"), False),
    ],
)
def test_is_retryable(error, retryable):
    assert is_retryable(error) is retryable


def test_retry_after_seconds_and_dates():
    now = 1_700_000_000.0
    assert parse_retry_after("3", now=now) == 3.0
    assert parse_retry_after(" 1.5 ", now=now) == 1.5
    assert parse_retry_after("-4", now=now) == 0.0
    date = email.utils.formatdate(now + 7, usegmt=True)
    assert parse_retry_after(date, now=now) == pytest.approx(7.0)
    assert parse_retry_after(email.utils.formatdate(now - 60, usegmt=True), now=now) == 0.0
    assert parse_retry_after(email.utils.formatdate(now + 2), now=now) == pytest.approx(2.0)
    for junk in (None, "", "soon", "inf", "nan", "Mon, 99 Foo 2020"):
        assert parse_retry_after(junk, now=now) is None


def test_snippet_is_short_and_single_line():
    assert (
        snippet(b"<html>\n  <h1>Bad Gateway</h1>\n</html>", str)
        == "<html> <h1>Bad Gateway</h1> </html>"
    )
    long = snippet(b"x" * 10_000, str)
    assert len(long) == SNIPPET_CHARS and long.endswith("...")
    assert snippet(b"\xff\xfe ok", str) == "\ufffd\ufffd ok"


def test_default_retry_strategy_honours_retry_after_and_skips_permanent_errors():
    strategy = default_retry_strategy(max_attempts=3, initial_delay=0.2, max_delay=10)
    assert strategy.max_attempts == 3
    assert strategy.delay_after_exception(1, ClientStatusError("400", status=400)) is None
    throttled = ThrottledError("429", status=429, retry_after=2.0)
    assert strategy.delay_after_exception(1, throttled) == 2.0
    delay = strategy.delay_after_exception(1, ServerError("500", status=500))
    assert 0.1 <= delay <= 0.2
    assert strategy.delay_after_exception(3, ServerError("500", status=500)) is None
