"""The partition's one ``aiohttp.ClientSession``: pooled keep-alive connections, the
secrets in its default headers, and aiohttp's own retry switched off."""

from __future__ import annotations

import aiohttp

from .attempt import ACCEPT_ENCODING
from .config import HttpEnricherConfig
from .secrets import Secret, read_sent_secrets

_DNS_CACHE_S = 300
_KEEPALIVE_S = 30.0


def open_session(config: HttpEnricherConfig) -> tuple[aiohttp.ClientSession, list[Secret]]:
    """A session for ``config`` and the secrets it sends (the bearer token first, if
    any), which every message must redact. Secrets are read here, on the executor."""
    headers = dict(config.headers)
    sent = read_sent_secrets(config.token_env, config.token_file, config.secret_headers)
    for name, secret in sent:  # secret_headers never name Authorization (validation.py)
        bearer = name == "Authorization"
        headers[name] = f"Bearer {secret.reveal()}" if bearer else secret.reveal()
    secrets = [secret for _, secret in sent]
    if config.body_template is not None or config.batch is not None:
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
    return session, secrets
