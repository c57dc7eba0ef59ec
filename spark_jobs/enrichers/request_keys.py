"""What a record asks the API: its request (URL and body) and the key that dedups it.

The HTTP enricher keys its in-flight sharing and its LRU cache by what is sent (method,
URL, body), or by the record's ``key_field`` when requests are batched. A resuming
partition keys the answers it replays the same way (``partition_runner/paid.py``), so
one definition serves both: a key paid for before a crash is the key asked after it.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping
from typing import Any

from .config import HttpEnricherConfig
from .errors import PermanentError
from .templates import FieldSource


class RequestKeys:
    """``keys(record)`` -> ``(key, url, body)``; raises an enrichment error for a record
    whose template fields are missing. ``url`` and ``body`` are None when batching."""

    def __init__(self, config: HttpEnricherConfig) -> None:
        self.method = config.method
        self._key_field = config.key_field if config.batch is not None else None
        self._url = None if config.batch is not None else config.compile_url()
        self._body = config.compile_body() if config.body_template is not None else None
        self._key_source = FieldSource("key_field", None)

    def __call__(self, record: Mapping[str, Any]) -> tuple[Hashable, str | None, str | None]:
        if self._url is None:
            return self._batch_key(record), None, None
        url = self._url.fill(record)
        if self._body is None:
            return (url if self.method == "GET" else (self.method, url)), url, None
        body = json.dumps(self._body.fill(record), separators=(",", ":"), default=str)
        return (self.method, url, body), url, body

    def _batch_key(self, record: Mapping[str, Any]) -> str | int:
        key_field = self._key_field
        assert key_field is not None
        key = self._key_source.value(record, key_field)
        if isinstance(key, bool) or not isinstance(key, str | int):
            raise PermanentError(
                f"key_field {key_field!r} must hold a string or an integer to batch on, "
                f"got {type(key).__name__}"
            )
        return key
