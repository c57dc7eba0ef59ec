"""Batching: many records per request to a batch endpoint (``BatchConfig``).

The settings travel nested (``HttpEnricherConfig.batch``), and are also accepted flat
with a ``batch_`` prefix (``batch_size``, ``batch_url_template``...), the spelling of
spec files written before the nesting; errors use the flat names, which both spellings
recognise. Fields marked ``fingerprint`` change what the enrichment computes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .json_paths import JsonPathError, compile_path
from .templates import UrlTemplate
from .validation import IDENTITY, check_base_url, check_int, check_str, positive_float

PREFIX = "batch_"


@dataclass(frozen=True)
class BatchConfig:
    """One POST per batch of records: ``{request_key: [key values...]}`` to ``url_template``."""

    size: int = field(metadata=IDENTITY)
    """Records per batch request."""
    url_template: str = field(metadata=IDENTITY)
    """URL of the batch endpoint (POST); no placeholders."""
    max_wait_s: float = 0.05
    """A partial batch is sent after waiting this long for more records."""
    request_key: str = field(default="ids", metadata=IDENTITY)
    """The batch request body is ``{request_key: [key_field values...]}``."""
    results_path: str = field(default="$.results", metadata=IDENTITY)
    """Where the list of result items is in the batch response."""
    result_id_field: str = field(default="id", metadata=IDENTITY)
    """Field of a result item that holds the id it answers."""
    error_field: str | None = field(default="error", metadata=IDENTITY)
    """A result item with this field means "not found" for its record (``not_found``)."""

    def __post_init__(self) -> None:
        check_int(self.size, "batch_size", minimum=1)
        object.__setattr__(self, "max_wait_s", positive_float(self.max_wait_s, "batch_max_wait_s"))
        check_str(self.url_template, "batch_url_template")
        if UrlTemplate(self.url_template, "batch_url_template").fields:
            raise ValueError("batch_url_template must not contain {field} placeholders")
        check_base_url(self.url_template, "batch_url_template")
        check_str(self.request_key, "batch_request_key")
        check_str(self.result_id_field, "batch_result_id_field")
        if self.error_field is not None:
            check_str(self.error_field, "batch_error_field")
        try:
            compile_path(self.results_path)
        except JsonPathError as exc:
            raise ValueError(f"batch_results_path: {exc}") from None

    @classmethod
    def parse(cls, value: Any) -> BatchConfig | None:
        """From a ``BatchConfig``, a mapping of its fields, or None (no batching)."""
        if value is None or isinstance(value, BatchConfig):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(f"batch must be a mapping of batch settings, got {value!r}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"unknown batch settings: {', '.join(unknown)}")
        if value.get("size") is None:
            raise ValueError("batch_size is required for batching")
        if value.get("url_template") is None:
            raise ValueError("batch_url_template is required when batch_size is set")
        return cls(**value)


def nest_flat_options(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with its flat ``batch_*`` keys folded into ``batch`` (one spelling only)."""
    flat = {k[len(PREFIX) :]: v for k, v in data.items() if k.startswith(PREFIX)}
    rest = {k: v for k, v in data.items() if not k.startswith(PREFIX)}
    if not flat:
        return rest
    if rest.get("batch") is not None:
        raise ValueError("batch: give the batch settings nested or as batch_* keys, not both")
    if flat.get("size") is None:  # batch_size: null spells "no batching"
        return rest
    return {**rest, "batch": flat}


def batch_identity(batch: BatchConfig | None) -> dict[str, Any]:
    """The fingerprinted batch settings under their flat names, as fingerprints hashed
    them before the settings were nested, so snapshots written then still resume."""
    identity = {}
    for spec in dataclasses.fields(BatchConfig):
        if not spec.metadata.get("fingerprint"):
            continue
        if batch is not None:
            value = getattr(batch, spec.name)
        else:
            value = None if spec.default is dataclasses.MISSING else spec.default
        identity[PREFIX + spec.name] = value
    return identity
