"""What a record asks the API: its request (URL and body) and the key that dedups it.

The HTTP enricher keys its in-flight sharing and its LRU cache by what is sent (method,
URL, body), or by the record's ``key_field`` when requests are batched. A resuming
partition keys the answers it replays the same way (``partition_runner/paid.py``), so
one definition serves both: a key paid for before a crash is the key asked after it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Mapping
from typing import Any

from .config import HttpEnricherConfig
from .errors import PermanentError
from .templates import FieldSource


def request_key(method: str, url: object, body: str | None) -> str:
    """The key of one request's answer across runs and modes (no header, so never the
    token): the response cache's key, and a batch request's ``custom_id`` (64 hex digits,
    what both providers' batch APIs take), so an answer paid in one mode answers the other."""
    return hashlib.sha256(f"{method}\n{url}\n{body or ''}".encode()).hexdigest()


class CallKeys:
    """``keys(record)`` -> ``(key, url, body)`` of a record's own call; raises an
    enrichment error for a record whose template fields are missing."""

    def __init__(self, config: HttpEnricherConfig) -> None:
        self.method = config.method
        self._url = config.compile_url()
        self._body = config.compile_body() if config.body_template is not None else None

    def __call__(self, record: Mapping[str, Any]) -> tuple[Hashable, str, str | None]:
        url = self._url.fill(record)
        if self._body is None:
            return (url if self.method == "GET" else (self.method, url)), url, None
        body = self._body.encode(record)
        return (self.method, url, body), url, body


class BatchKeys:
    """``keys(record)`` -> ``(key, None, None)`` when requests are batched: the key is the
    record's ``key_field`` value, the id the batch request sends."""

    def __init__(self, config: HttpEnricherConfig) -> None:
        if config.key_field is None:  # the config refuses this already
            raise ValueError("key_field is required when batch_size is set (the id sent)")
        self._key_field = config.key_field
        self._key_source = FieldSource("key_field", None)

    def __call__(self, record: Mapping[str, Any]) -> tuple[str | int, None, None]:
        key = self._key_source.value(record, self._key_field)
        if isinstance(key, bool) or not isinstance(key, str | int):
            raise PermanentError(
                f"key_field {self._key_field!r} must hold a string or an integer to batch on, "
                f"got {type(key).__name__}"
            )
        return key, None, None


RequestKeys = CallKeys | BatchKeys
"""How a config keys its records: ``url`` and ``body`` are None when batching."""


def request_keys(config: HttpEnricherConfig) -> RequestKeys:
    """The keys of ``config``'s requests: batched ones or one call per record."""
    return BatchKeys(config) if config.batch is not None else CallKeys(config)
