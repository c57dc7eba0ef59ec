"""The bearer token is sent, and shows up nowhere else: logs, errors, failures, reprs,
tracebacks, the serialised config."""

from __future__ import annotations

import base64
import html
import json
import logging
import socket
import traceback
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
from aiohttp import web

from demo.api import run_demo_api
from demo.faults import DemoConfig
from spark_jobs.asyncwait import AsyncWaitOperator, Failure
from spark_jobs.enrichers import (
    AccountError,
    ClientStatusError,
    HttpEnricher,
    HttpEnricherConfig,
    SecretError,
    ServerError,
    TransportError,
    default_retry_strategy,
)

from .http_support import serve

TOKEN = "tok-Zq81-do-not-leak"
SERVER_TOKEN = "tok-server-side-only"
FIELDS = {"name": "$.name"}


@pytest.fixture(autouse=True)
def debug_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


def exception_texts(error: BaseException) -> str:
    return "\n".join([str(error), repr(error), *traceback.format_exception(error)])


def assert_no_token(*texts: Any) -> None:
    for text in texts:
        assert TOKEN not in str(text)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def run_operator(enrich: HttpEnricher, records: list) -> list:
    retry = default_retry_strategy(max_attempts=2, initial_delay=0.01)
    operator = AsyncWaitOperator(enrich, capacity=10, retry=retry)
    return [o async for o in operator.run(records)][:-1]


async def test_the_token_from_env_authenticates(monkeypatch, debug_logs):
    monkeypatch.setenv("CLIENT_TOKEN", TOKEN)
    monkeypatch.setenv("SERVER_TOKEN", TOKEN)
    async with run_demo_api(DemoConfig(token_env="SERVER_TOKEN")) as base_url:
        config = HttpEnricherConfig(
            url_template=base_url + "/customers/{id}",
            response_fields=FIELDS,
            token_env="CLIENT_TOKEN",
        )
        async with HttpEnricher(config) as enrich:
            assert (await enrich({"id": "c1"}))["name"]
            assert_no_token(repr(enrich), repr(config), json.dumps(config.to_dict()))
    assert_no_token(debug_logs.text)


async def test_a_401_leaks_no_token(monkeypatch, debug_logs, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    monkeypatch.setenv("SERVER_TOKEN", SERVER_TOKEN)
    async with run_demo_api(DemoConfig(token_env="SERVER_TOKEN")) as base_url:
        config = HttpEnricherConfig(
            url_template=base_url + "/customers/{id}",
            response_fields=FIELDS,
            token_file=str(token_file),
        )
        async with HttpEnricher(config) as enrich:
            with pytest.raises(AccountError) as caught:
                await enrich({"id": "c1"})
            [failure] = await run_operator(enrich, [{"id": "c2"}])
            stats = enrich.stats
    assert caught.value.status == 401
    assert isinstance(failure, Failure) and failure.attempts == 1
    assert "HTTP 401" in failure.error
    assert stats.responses_by_status == {401: 2}
    warnings = [r for r in debug_logs.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(token_file) in warnings[0].getMessage()
    assert_no_token(exception_texts(caught.value), failure.error, debug_logs.text, repr(enrich))


async def test_a_connection_error_leaks_no_token(monkeypatch, debug_logs):
    monkeypatch.setenv("CLIENT_TOKEN", TOKEN)
    config = HttpEnricherConfig(
        url_template=f"http://127.0.0.1:{closed_port()}/customers/{{id}}",
        response_fields=FIELDS,
        token_env="CLIENT_TOKEN",
    )
    async with HttpEnricher(config) as enrich:
        with pytest.raises(TransportError) as caught:
            await enrich({"id": "c1"})
        [failure] = await run_operator(enrich, [{"id": "c2"}])
    assert isinstance(failure, Failure) and failure.attempts == 2
    assert "ClientConnectorError" in failure.error
    assert "retryable: GET http://127.0.0.1" in debug_logs.text  # the logs were captured
    assert_no_token(exception_texts(caught.value), failure.error, debug_logs.text)


async def test_a_server_echoing_the_header_is_redacted(monkeypatch, debug_logs):
    async def echo(request: web.Request) -> web.Response:
        return web.Response(status=500, text=f"bad request, you sent {request.headers}")

    monkeypatch.setenv("CLIENT_TOKEN", TOKEN)
    async with serve(echo) as base_url:
        config = HttpEnricherConfig(
            url_template=base_url + "/{id}", response_fields=FIELDS, token_env="CLIENT_TOKEN"
        )
        async with HttpEnricher(config) as enrich:
            with pytest.raises(ServerError) as caught:
                await enrich({"id": "c1"})
    assert "Bearer ***" in str(caught.value)
    assert_no_token(exception_texts(caught.value), debug_logs.text)


async def test_a_server_echoing_the_token_as_its_error_code_names_no_outcome_by_it(monkeypatch):
    """The token is an identifier, so it passes for a provider's code; the progress lines'
    count of outcomes (``call_outcomes.py``) redacts it like any text from the server."""

    async def echo_code(request: web.Request) -> web.Response:
        code = request.headers["Authorization"].removeprefix("Bearer ")
        return web.json_response({"error": {"code": code, "message": "no"}}, status=400)

    monkeypatch.setenv("CLIENT_TOKEN", TOKEN)
    async with serve(echo_code) as base_url:
        config = HttpEnricherConfig(
            url_template=base_url + "/{id}", response_fields=FIELDS, token_env="CLIENT_TOKEN"
        )
        async with HttpEnricher(config) as enrich:
            with pytest.raises(ClientStatusError):
                await enrich({"id": "c1"})
            recent = enrich.recent_calls()
    [(outcome, count)] = recent.items()
    assert count == 1 and outcome.startswith("400 ")
    assert_no_token(recent)


async def test_an_unset_token_source_fails_on_open_naming_only_the_source(monkeypatch):
    monkeypatch.delenv("UNSET_TOKEN_VAR", raising=False)
    config = HttpEnricherConfig(
        url_template="http://127.0.0.1:1/{id}", response_fields=FIELDS, token_env="UNSET_TOKEN_VAR"
    )
    with pytest.raises(SecretError, match="UNSET_TOKEN_VAR"):
        async with HttpEnricher(config):
            pass


async def test_an_api_key_header_comes_from_the_environment_and_is_redacted(monkeypatch, caplog):
    """An API key sent in its own header is read on the executor like the token, never
    stored in the config, and hidden in messages even when the server echoes it."""
    monkeypatch.setenv("CRM_API_KEY", "k3y-f0r-th3-crm")
    seen: list[str | None] = []

    async def echo_the_key(request: web.Request) -> web.Response:
        seen.append(request.headers.get("X-Api-Key"))
        return web.json_response(
            {"error": f"key {request.headers['X-Api-Key']} lacks scope"}, status=403
        )

    async with serve(echo_the_key) as base_url:
        config = HttpEnricherConfig(
            url_template=base_url + "/{id}",
            response_fields={"name": "$.name"},
            secret_headers={"X-Api-Key": "CRM_API_KEY"},
        )
        assert "k3y-f0r-th3-crm" not in json.dumps(config.to_dict())
        async with HttpEnricher(config) as enrich:
            with caplog.at_level(logging.DEBUG), pytest.raises(ClientStatusError) as caught:
                await enrich({"id": "c1"})
    assert seen == ["k3y-f0r-th3-crm"]
    assert "k3y-f0r-th3-crm" not in str(caught.value)
    assert "HTTP 403" in str(caught.value) and "(body not shown)" in str(caught.value)
    assert "k3y-f0r-th3-crm" not in caplog.text


ODD_TOKEN = 'tok/Zq+81"do=not&leak'
ODD_KEY = "k3y/with+plus=and?"


def echoed_forms(secret: str) -> dict[str, str]:
    """How a server may quote a secret back, written out here independently of the
    redaction code: escaped, encoded, or cut short."""
    raw = secret.encode()
    return {
        "raw": secret,
        "json": json.dumps(secret)[1:-1],
        "json, escaped slash": json.dumps(secret)[1:-1].replace("/", "\\/"),
        "quote": quote(secret, safe=""),
        "quote, lower hex": quote(secret, safe="").lower(),
        "quote_plus": quote_plus(secret),
        "base64": base64.b64encode(raw).decode(),
        "base64 url, unpadded": base64.urlsafe_b64encode(raw).decode().rstrip("="),
        "prefix": secret[:10],
    }


async def echoed_failures(
    echo: Any, token_env: str, key_env: str, error: type[Exception], records: int
) -> tuple[pytest.ExceptionInfo[Exception], list]:
    """Against a server answering with ``echo``: the error of one call sending the token
    in ``token_env`` and the ``X-Api-Key`` in ``key_env``, and the operator's failures
    (what become dead letters) of records ``0`` to ``records - 1``."""
    async with serve(echo) as base_url:
        config = HttpEnricherConfig(
            url_template=base_url + "/{id}",
            response_fields=FIELDS,
            token_env=token_env,
            secret_headers={"X-Api-Key": key_env},
        )
        async with HttpEnricher(config) as enrich:
            with pytest.raises(error) as caught:
                await enrich({"id": "0"})
            failures = await run_operator(enrich, [{"id": str(i)} for i in range(records)])
    return caught, failures


@pytest.mark.parametrize("status", [401, 500])
async def test_a_secret_echoed_in_any_form_reaches_no_dead_letter_error_or_log(
    monkeypatch, debug_logs, status
):
    """A server quoting the token and an API key back JSON-escaped, URL-encoded, base64
    or cut short: the failures (what becomes the dead letter's error), the raised error
    and the logs hold none of it; a 401's body is not shown at all."""
    monkeypatch.setenv("ODD_TOKEN", ODD_TOKEN)
    monkeypatch.setenv("ODD_KEY", ODD_KEY)
    forms = list(echoed_forms(ODD_TOKEN).items())
    key_forms = list(echoed_forms(ODD_KEY).values())
    received: list[tuple[str | None, str | None]] = []

    async def echo(request: web.Request) -> web.Response:
        received.append((request.headers.get("Authorization"), request.headers.get("X-Api-Key")))
        index = int(request.match_info["tail"])
        text = f"you sent {forms[index][1]} with key {key_forms[index]}; no"
        return web.Response(status=status, text=text)

    error = AccountError if status == 401 else ServerError
    caught, failures = await echoed_failures(echo, "ODD_TOKEN", "ODD_KEY", error, len(forms))
    assert (f"Bearer {ODD_TOKEN}", ODD_KEY) in received  # the server did see them
    assert len(failures) == len(forms) and all(isinstance(f, Failure) for f in failures)
    texts = [exception_texts(caught.value), debug_logs.text, *(f.error for f in failures)]
    for name, form in [*forms, *(("key", form) for form in key_forms)]:
        for text in texts:
            assert form not in text, f"the {name} form {form!r} leaked: {text[:300]!r}"
    for failure in failures:
        if status == 401:
            assert "(body not shown)" in failure.error and "you sent" not in failure.error
        else:
            assert "you sent ***" in failure.error and "key ***" in failure.error


def test_secret_headers_may_not_shadow_other_headers():
    with pytest.raises(ValueError, match="secret_headers"):
        HttpEnricherConfig(
            url_template="http://api/{id}",
            response_fields={"name": "$.name"},
            headers={"X-Api-Key": "public"},
            secret_headers={"x-api-key": "CRM_API_KEY"},
        )


AWS_STYLE_TOKEN = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SPACED_KEY = 'k3y wörd+/= "quoted" \\ end'


def every_echoed_form(secret: str) -> list[str]:
    """``echoed_forms`` and the rest of what servers do: ``quote`` keeping ``/``, Go's
    and Jackson's ``\\uXXXX``, HTML, a ``repr``, and Basic auth's base64 after ``user:``."""
    user_b64 = base64.b64encode(f"api:{secret}".encode()).decode()[6:]  # 6 hold "api:"
    return [
        *echoed_forms(secret).values(),
        quote(secret),
        "".join(f"\\u{ord(c):04X}" for c in secret),
        html.escape(secret),
        repr(secret)[1:-1],
        user_b64,
    ]


def runs_of(form: str, size: int = 8) -> set[str]:
    return {form[i : i + size] for i in range(max(1, len(form) - size + 1))}


@pytest.mark.parametrize("status", [400, 500])
async def test_a_secret_with_slashes_spaces_or_non_ascii_leaves_no_run_of_itself(
    monkeypatch, debug_logs, status
):
    """Each record's answer echoes the token and the key in one form (a JSON error body,
    as ``json_response`` escapes it): the dead letters' errors, the raised error and the
    logs hold no eight characters in a row of any form."""
    monkeypatch.setenv("AWS_TOKEN", AWS_STYLE_TOKEN)
    monkeypatch.setenv("SPACED_KEY", SPACED_KEY)
    token_forms, key_forms = every_echoed_form(AWS_STYLE_TOKEN), every_echoed_form(SPACED_KEY)

    async def echo(request: web.Request) -> web.Response:
        index = int(request.match_info["tail"])
        assert request.headers["X-Api-Key"] == SPACED_KEY  # the server saw them
        message = f"invalid api key {token_forms[index]} (key {key_forms[index]})"
        return web.json_response({"error": {"message": message}}, status=status)

    error = ClientStatusError if status == 400 else ServerError
    records = len(key_forms)
    caught, failures = await echoed_failures(echo, "AWS_TOKEN", "SPACED_KEY", error, records)
    assert all(isinstance(f, Failure) and "invalid api key ***" in f.error for f in failures)
    texts = [exception_texts(caught.value), debug_logs.text, *(f.error for f in failures)]
    for form in [*token_forms, *key_forms]:
        for run in runs_of(form):
            assert not any(run in text for text in texts), f"{run!r} of {form!r} leaked"
