"""Redirects and the secrets: real loopback servers on two ports (and one over TLS). A
redirect to another origin never receives ``Authorization`` nor ``X-Api-Key`` and is a
dead letter naming where it pointed (without its query); none is followed by default;
``follow_redirects: same-origin`` follows a redirect on the same origin as a call of its
own, counted, paced and paid for; only what was allowed is kept under the original key."""

from __future__ import annotations

import logging
import ssl
import subprocess
import time
from pathlib import Path

import aiohttp.connector
import pytest
from aiohttp import web

from spark_jobs.asyncwait import AsyncWaitOperator, Failure
from spark_jobs.enrichers import (
    BudgetExhausted,
    ClientStatusError,
    HttpEnricher,
    HttpEnricherConfig,
    RequestBudget,
    default_retry_strategy,
)

from .http_support import serve

TOKEN = "tok-redirect-Zq81"
API_KEY = "key-redirect-k3y"
FIELDS = {"name": "$.name"}


@pytest.fixture(autouse=True)
def secrets(monkeypatch):
    monkeypatch.setenv("REDIRECT_TOKEN", TOKEN)
    monkeypatch.setenv("REDIRECT_KEY", API_KEY)


def config(base_url: str, **overrides) -> HttpEnricherConfig:
    return HttpEnricherConfig(
        url_template=base_url + "/customers/{id}",
        response_fields=FIELDS,
        token_env="REDIRECT_TOKEN",
        secret_headers={"X-Api-Key": "REDIRECT_KEY"},
        **overrides,
    )


class Store:
    """Answers kept across runs, in memory (``StoredResponses``)."""

    def __init__(self) -> None:
        self.kept: dict[tuple[str, str, str | None], bytes] = {}

    def get(self, method: str, url: str, body: str | None) -> bytes | None:
        return self.kept.get((method, url, body))

    def put(self, method: str, url: str, body: str | None, payload: bytes) -> None:
        self.kept[(method, url, body)] = payload


class Elsewhere:
    """The other origin: records every request and the secrets it carried."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None, str | None]] = []

    async def __call__(self, request: web.Request) -> web.Response:
        headers = request.headers
        self.seen.append((request.path, headers.get("Authorization"), headers.get("X-Api-Key")))
        return web.json_response({"name": "from elsewhere"})


def redirecting_to(target: str, status: int = 302):
    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=status, headers={"Location": target})

    return handler


@pytest.mark.parametrize("policy", [{}, {"follow_redirects": "same-origin"}], ids=str)
async def test_a_redirect_to_another_port_never_receives_the_secrets(policy, caplog):
    caplog.set_level(logging.DEBUG)
    elsewhere = Elsewhere()
    store = Store()
    async with serve(elsewhere) as other_url:
        target = f"{other_url}/collect?stolen={TOKEN}#frag"
        async with serve(redirecting_to(target)) as base_url:
            async with HttpEnricher(config(base_url, **policy), store) as enrich:
                for _ in range(2):  # nothing kept: the second call asks again
                    with pytest.raises(ClientStatusError) as caught:
                        await enrich({"id": "c1"})
                stats = enrich.stats
    assert elsewhere.seen == []
    message = str(caught.value)
    assert caught.value.status == 302 and f"a redirect to {other_url}/collect" in message
    assert "stolen" not in message and TOKEN not in message and "frag" not in message
    assert stats.requests_made == 2 and stats.responses_by_status == {302: 2}
    assert store.kept == {}
    assert TOKEN not in caplog.text and API_KEY not in caplog.text


@pytest.fixture
def tls(tmp_path: Path, monkeypatch) -> ssl.SSLContext:
    """A server context for 127.0.0.1 whose self-signed certificate the client trusts
    (aiohttp's default verified context, swapped for one that also holds it)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    client = ssl.create_default_context(cafile=str(cert))
    monkeypatch.setattr(aiohttp.connector, "_SSL_CONTEXT_VERIFIED", client)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(str(cert), str(key))
    return server


async def test_a_redirect_from_https_to_plain_http_is_not_followed(tls):
    elsewhere = Elsewhere()
    async with serve(elsewhere) as plain_url:
        redirect = redirecting_to(f"{plain_url}/customers/c1", status=307)
        async with serve(redirect, tls) as secure_url:
            cfg = config(secure_url, follow_redirects="same-origin")
            async with HttpEnricher(cfg) as enrich:
                with pytest.raises(ClientStatusError, match="another scheme, host or port"):
                    await enrich({"id": "c1"})
                assert enrich.stats.responses_by_status == {307: 1}  # TLS worked
    assert secure_url.startswith("https://") and elsewhere.seen == []


class SameOriginApi:
    """``/customers/{id}`` redirects to ``/v2/customers/{id}?sig=…`` on the same origin;
    records when each request arrived."""

    def __init__(self) -> None:
        self.stamps: list[float] = []

    async def __call__(self, request: web.Request) -> web.Response:
        self.stamps.append(time.monotonic())
        if request.path.startswith("/v2/"):
            return web.json_response({"name": request.path.rsplit("/", 1)[-1]})
        raise web.HTTPFound(f"/v2{request.path}?sig=abc")


async def test_an_allowed_same_origin_redirect_is_a_call_counted_paced_and_paid():
    handler = SameOriginApi()
    store = Store()
    async with serve(handler) as base_url:
        cfg = config(base_url, follow_redirects="same-origin", requests_per_second=20)
        async with HttpEnricher(cfg, store) as enrich:
            retry = default_retry_strategy(max_attempts=1)
            operator = AsyncWaitOperator(enrich, capacity=5, retry=retry)
            outputs = [o async for o in operator.run([{"id": f"c{i}"} for i in range(5)])][:-1]
            stats = enrich.stats
        async with HttpEnricher(cfg, request_budget=RequestBudget(1)) as enrich:
            with pytest.raises(BudgetExhausted):  # the hop needs a second request
                await enrich({"id": "c9"})
    assert sorted(o.value["name"] for o in outputs) == [f"c{i}" for i in range(5)]
    assert stats.requests_made == 10
    assert stats.responses_by_status == {302: 5, 200: 5}
    stamps = handler.stamps[:10]
    assert stamps[-1] - stamps[0] >= 9 / 20 * 0.9  # ten paced calls at 20/s, not five
    url = f"{base_url}/customers/c3"
    assert store.kept[("GET", url, None)] == b'{"name": "c3"}'  # allowed: kept as asked
    assert set(store.kept) == {("GET", f"{base_url}/customers/c{i}", None) for i in range(5)}


async def test_a_redirect_refused_by_default_is_a_dead_letter_naming_the_option():
    handler = SameOriginApi()
    async with serve(handler) as base_url:
        async with HttpEnricher(config(base_url)) as enrich:
            retry = default_retry_strategy(max_attempts=3, initial_delay=0.01)
            operator = AsyncWaitOperator(enrich, capacity=5, retry=retry)
            [failure] = [o async for o in operator.run([{"id": "c1"}])][:-1]
    assert isinstance(failure, Failure) and failure.attempts == 1  # permanent
    assert f"HTTP 302 from GET {base_url}/customers/c1: a redirect to {base_url}/v2/" in (
        failure.error
    )
    assert "follow_redirects: none" in failure.error and "sig=" not in failure.error
