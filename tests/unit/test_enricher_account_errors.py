"""Account-level answers told apart from the provider's error body (``account_errors.py``)."""

from __future__ import annotations

import json

import pytest

from spark_jobs.enrichers import is_retryable, is_throttled
from spark_jobs.enrichers.account_errors import (
    MAX_ERROR_BODY,
    ProviderError,
    account_error,
    is_account_level,
    provider_error,
)
from spark_jobs.enrichers.errors import SNIPPET_CHARS, AccountError


def openai(code: str | None, kind: str, message: str = "m") -> bytes:
    return json.dumps(
        {"error": {"message": message, "type": kind, "param": None, "code": code}}
    ).encode()


def anthropic(kind: str, message: str = "m") -> bytes:
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


def azure(code: str, message: str = "m") -> bytes:
    return json.dumps({"error": {"code": code, "message": message}}).encode()


ACCOUNT_ANSWERS = [
    (429, openai("insufficient_quota", "insufficient_quota")),
    (429, openai(None, "insufficient_quota")),  # older bodies: the type alone
    (429, openai("credit_balance_exhausted", "insufficient_quota")),
    (429, openai("organization_spend_limit_exceeded", "insufficient_quota")),
    (429, openai("project_spend_limit_exceeded", "insufficient_quota")),
    (429, openai("organization_usage_limit_exceeded", "insufficient_quota")),
    (429, openai("billing_hard_limit_reached", "insufficient_quota")),
    (429, openai("billing_not_active", "insufficient_quota")),
    (401, openai("invalid_api_key", "invalid_request_error")),
    (401, openai("account_deactivated", "invalid_request_error")),
    (403, openai("unsupported_country_region_territory", "request_forbidden")),
    (404, openai("model_not_found", "invalid_request_error")),
    (404, azure("DeploymentNotFound", "The API deployment for this resource does not exist.")),
    (401, anthropic("authentication_error", "invalid x-api-key")),
    (403, anthropic("permission_error", "Your API key does not have permission")),
    (402, anthropic("billing_error", "Billing error")),
    (404, anthropic("not_found_error", "model: claude-nonexistent")),
    (400, anthropic("invalid_request_error", "Your credit balance is too low to access the API.")),
    (401, b"Unauthorized"),  # a bare 401: the job's credentials, the same for every record
    (401, b""),
]


@pytest.mark.parametrize(("status", "body"), ACCOUNT_ANSWERS)
def test_every_listed_answer_is_account_level(status: int, body: bytes) -> None:
    assert is_account_level(status, provider_error(body))


NOT_ACCOUNT = [
    (429, openai("rate_limit_exceeded", "requests", "Rate limit reached for requests")),
    (429, anthropic("rate_limit_error")),
    (529, anthropic("overloaded_error")),
    (503, openai("server_is_overloaded", "service_unavailable_error")),
    (500, openai("insufficient_quota", "insufficient_quota")),  # only a 4xx refuses an account
    (404, anthropic("not_found_error", "file_abc123 not found")),  # the record's resource
    (400, anthropic("invalid_request_error", "messages: field required")),
    (400, openai("context_length_exceeded", "invalid_request_error")),
    (403, b"Forbidden"),  # a bare 403: maybe one record's resource
    (404, b'{"detail": "no such customer"}'),
]


@pytest.mark.parametrize(("status", "body"), NOT_ACCOUNT)
def test_throttles_overloads_and_per_record_errors_are_not(status: int, body: bytes) -> None:
    assert not is_account_level(status, provider_error(body))


HOSTILE = [
    b"[" * 100_000 + b"]" * 100_000,  # nested beyond the parser
    b'{"error": {"code": "insufficient_quota"' + b" " * MAX_ERROR_BODY + b"}}",  # too large
    b'\xff\xfe{"error": {"code": "insufficient_quota"}}',  # not UTF-8
    b'{"error": "insufficient_quota"}',  # not an object
    b'{"error": {"code": ["insufficient_quota"]}}',  # not a string
    b'{"error": {"code": "insufficient_quota\\nERROR forged log line"}}',  # not an identifier
    b'["insufficient_quota"]',
    b"null",
    b'{"error": {"code": 429}}',
]


@pytest.mark.parametrize("body", HOSTILE)
def test_hostile_bodies_say_nothing(body: bytes) -> None:
    assert not is_account_level(429, provider_error(body))


def test_the_message_is_printable_and_cut() -> None:
    body = openai("insufficient_quota", "insufficient_quota", "line\nbreak\x1b[31m " + "x" * 5000)
    error = provider_error(body)
    assert error is not None and error.code == "insufficient_quota"
    assert "\n" not in error.message and "\x1b" not in error.message
    assert len(error.message) == SNIPPET_CHARS and error.message.endswith("...")


def test_the_code_is_error_code_else_error_type() -> None:
    assert provider_error(openai("rate_limit_exceeded", "requests")) == ProviderError(
        "rate_limit_exceeded", "requests", "m"
    )
    assert provider_error(anthropic("overloaded_error")) == ProviderError(
        "overloaded_error", None, "m"
    )


def test_the_error_names_status_code_and_message_redacted_and_is_permanent() -> None:
    message = "You exceeded your current quota, please check your plan and billing details"
    body = openai("insufficient_quota", "insufficient_quota", message + " for key sk-secret-1234")
    error = account_error(
        429,
        provider_error(body),
        "POST http://api/v1",
        lambda t: t.replace("sk-secret-1234", "***"),
    )
    assert isinstance(error, AccountError) and error.status == 429
    assert error.code == "insufficient_quota"
    assert str(error) == f"HTTP 429 insufficient_quota: {message} for key *** (POST http://api/v1)"
    assert not is_retryable(error) and not is_throttled(error)


def test_a_401_or_403_message_is_not_shown() -> None:
    body = openai("invalid_api_key", "invalid_request_error", "Incorrect API key provided: sk-pr")
    error = account_error(401, provider_error(body), "POST http://api/v1", str)
    assert "Incorrect" not in str(error) and "sk-pr" not in str(error)
    assert str(error).startswith("HTTP 401 invalid_api_key: the credentials were refused")
    assert str(account_error(401, None, "GET http://api", str)).startswith("HTTP 401: the")
