"""Who may answer from the response cache: a key that signs its entries, and a scope per
credential and headers.

Whoever can write the cache directory could once put any answer in it: the check was an
unkeyed sha256 that anyone can compute. Entries are now signed with an HMAC whose key only
the job's deployment has: the environment variable ``--cache-key-env`` names
(``ENRICHMENT_CACHE_KEY`` by default, read on the executors as the token is), or, when it
is unset, a key derived from the API secrets the job sends (token, ``secret_headers``).
With neither the cache is refused: an unsigned cache would serve whatever was written.

Answers also depend on who asks: different tokens or tenants (a header) may get different
answers to the same URL. The cache is therefore split by *scope*, an HMAC of the
configured headers and of the secret values (never the values themselves) under that key:
``<cache dir>/scope-<32 hex>/partitions=N/...``. A run reads, answers from, merges and
deletes expired files only within its own scope, so another credential's entries are
neither served nor removed by it. A changed token, header or key starts a cold scope.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from spark_jobs.enrichers.secrets import Secret, SecretError, read_sent_secrets

_KEY_LABEL = b"enrichment response cache key\n"
_DERIVED_LABEL = b"enrichment response cache key from the API secrets\n"
_SCOPE_LABEL = b"enrichment response cache scope\n"


@dataclass(frozen=True)
class CacheScope:
    """The signing key (never shown) and the scope's folder name."""

    name: str
    key: bytes = field(repr=False)

    def sign(self, *parts: bytes) -> str:
        """The HMAC-SHA256 (hex) of ``parts`` under this scope's key and name."""
        mac = hmac.new(self.key, self.name.encode("ascii"), hashlib.sha256)
        for part in parts:
            mac.update(len(part).to_bytes(8, "big"))
            mac.update(part)
        return mac.hexdigest()


def scope_of(
    key: bytes, headers: Mapping[str, str], sent: Sequence[tuple[str, Secret]]
) -> CacheScope:
    """The scope of ``headers`` and the ``sent`` secrets under ``key``."""
    identity = json.dumps(
        {
            "headers": sorted((k.lower(), v) for k, v in headers.items()),
            "secrets": sorted((name.lower(), secret.reveal()) for name, secret in sent),
        },
        separators=(",", ":"),
    )
    digest = hmac.new(key, _SCOPE_LABEL + identity.encode(), hashlib.sha256).hexdigest()
    return CacheScope(f"scope-{digest[:32]}", key)


def signing_key(key_env: str, sent: Sequence[tuple[str, Secret]]) -> bytes:
    """The key from ``key_env``, else one derived from the ``sent`` secrets; raises
    :class:`SecretError` naming ``--cache-key-env`` when there is neither."""
    value = os.environ.get(key_env, "").strip()
    if value:
        return hmac.new(_KEY_LABEL, value.encode(), hashlib.sha256).digest()
    if not sent:
        raise SecretError(
            f"cache_key_env: environment variable {key_env} is not set and the API has no "
            "secret to derive a key from: an unsigned response cache would serve whatever "
            "was written into it"
        )
    material = json.dumps([(n.lower(), s.reveal()) for n, s in sent], separators=(",", ":"))
    return hmac.new(_DERIVED_LABEL, material.encode(), hashlib.sha256).digest()


def read_cache_scope(
    key_env: str,
    headers: Mapping[str, str],
    token_env: str | None,
    token_file: str | None,
    secret_headers: Mapping[str, str],
) -> CacheScope:
    """The scope of an HTTP enricher's configuration, read on the executor."""
    sent = read_sent_secrets(token_env, token_file, secret_headers)
    return scope_of(signing_key(key_env, sent), headers, sent)
