"""What to call for each record and what to keep from the answer: ``HttpEnricherConfig``.

The Spark job builds the config on the driver and ships it to every task as JSON
(:meth:`HttpEnricherConfig.to_dict` / :meth:`~HttpEnricherConfig.from_dict`), so it
holds only plain data. Secrets are referenced by source (``token_env``/``token_file``)
and read where the HTTP session opens. Everything is validated when the config is built,
on the driver, so a typo fails the job before any task starts, with a ValueError naming
the field. :meth:`~HttpEnricherConfig.fingerprint` lets a resumed run notice that the
enrichment changed since the snapshot it resumes from.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from .json_paths import FIELD_TYPES, JsonPathError, compile_path
from .templates import BodyTemplate, TemplateError, UrlTemplate

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
NOT_FOUND_POLICIES = ("null", "fail")

# Fields that do not change what the enrichment computes: where the secret comes from,
# and tuning (how fast, how many at once, how long to wait). A resumed run may change them.
_NOT_IDENTITY = (
    "token_env",
    "token_file",
    "secret_headers",
    "requests_per_second",
    "partitions",
    "capacity",
    "throttle_window",
    "throttle_share",
    "cache_size",
    "coalesce",
    "batch_max_wait_s",
    "connect_timeout",
    "first_byte_timeout",
    "read_timeout",
    "total_timeout",
    "max_response_bytes",
    "hedge_after",
)
IDEMPOTENT_METHODS = ("GET", "PUT", "DELETE")
DEFAULT_MAX_RESPONSE_BYTES = 10 * 2**20
_PERCENTILE = re.compile(r"^p(?P<value>\d{1,2}(?:\.\d+)?)$")


@dataclass(frozen=True)
class ResponseField:
    """One output field: a JSON path into the response and the type to convert to."""

    path: str
    type: str = "string"

    def __post_init__(self) -> None:
        if self.type not in FIELD_TYPES:
            raise ValueError(f"type must be one of {', '.join(FIELD_TYPES)}, got {self.type!r}")
        compile_path(self.path)

    @classmethod
    def parse(cls, value: Any) -> ResponseField:
        """From ``"$.path"``, ``["$.path", "type"]`` or ``{"path": ..., "type": ...}``."""
        if isinstance(value, ResponseField):
            return value
        if isinstance(value, str):
            return cls(value)
        if isinstance(value, list | tuple) and len(value) == 2:
            return cls(*value)
        if isinstance(value, Mapping) and set(value) <= {"path", "type"} and "path" in value:
            return cls(**value)
        raise ValueError(
            f'expected "$.path", ["$.path", "type"] or {{"path": ..., "type": ...}}, got {value!r}'
        )


@dataclass(frozen=True)
class HttpEnricherConfig:
    """How to enrich a record with one HTTP call (or one batched call for many records).

    Output: a dict with one key per ``response_fields`` entry. In batch mode the paths
    apply to each item of the response list rather than to the whole response.
    """

    url_template: str | None = None
    """``http(s)://host/path/{field}``; required unless batching. Values are URL-encoded."""
    response_fields: Mapping[str, ResponseField] = field(default_factory=dict)
    """Output name -> ResponseField (``from_dict`` also takes ``["$.path", "type"]``)."""
    method: str = "GET"
    body_template: Any = None
    """JSON body; ``{field}`` placeholders in its strings are filled from the record."""
    headers: Mapping[str, str] = field(default_factory=dict)
    token_env: str | None = None
    """Environment variable holding the bearer token (read on the executor)."""
    token_file: str | None = None
    """File holding the bearer token (read on the executor)."""
    secret_headers: Mapping[str, str] = field(default_factory=dict)
    """Header name -> environment variable holding its value, for API keys sent in a
    header other than Authorization (``{"X-Api-Key": "CRM_API_KEY"}``). Read on the
    executor like the token, and redacted from every message."""
    not_found: Literal["null", "fail"] = "null"
    """On 404: every output field None ("null") or a permanent failure ("fail")."""
    key_field: str | None = None
    """Record field identifying a record: named in error messages, sent when batching."""
    requests_per_second: float | None = None
    """Request budget of the whole job (retries included); None for no limit."""
    partitions: int = 1
    """How many partitions share ``requests_per_second`` (each gets an equal slice)."""
    capacity: int = 100
    """Most requests in flight per partition; also the connection pool's per-host limit."""
    throttle_window: int = 50
    """How many recent answers decide whether throttling is sustained."""
    throttle_share: float = 0.2
    """Share of 429s in the window that halves the concurrency; isolated 429s only delay
    their own record (``Retry-After``). Successes win the slots back."""
    cache_size: int = 10_000
    """Final answers kept per partition, by request; 0 disables the cache."""
    coalesce: bool = True
    """Identical requests in flight at once share one call."""
    batch_size: int | None = None
    """Records per batch request; None disables batching."""
    batch_max_wait_s: float = 0.05
    """A partial batch is sent after waiting this long for more records."""
    batch_url_template: str | None = None
    """URL of the batch endpoint (POST); required when batching; no placeholders."""
    batch_request_key: str = "ids"
    """The batch request body is ``{batch_request_key: [key_field values...]}``."""
    batch_results_path: str = "$.results"
    """Where the list of result items is in the batch response."""
    batch_result_id_field: str = "id"
    """Field of a result item that holds the id it answers."""
    batch_error_field: str | None = "error"
    """A result item with this field means "not found" for its record (``not_found``)."""
    connect_timeout: float | None = 5.0
    """Per attempt: longest wait for the TCP (and TLS) connection."""
    first_byte_timeout: float | None = 10.0
    """Per attempt: longest wait from sending the request to the response headers."""
    read_timeout: float | None = 5.0
    """Per attempt: longest silence while the body arrives. A stalled body is cut off
    and the attempt retried, long before the record's own timeout."""
    total_timeout: float | None = 15.0
    """Per attempt: longest time from connecting to the last body byte. The record's
    timeout (the operator's) spans all attempts, so keep this well below it."""
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    """Largest response body accepted, counted after decompression; a larger one makes
    the record a dead letter naming the limit, and reading stops there."""
    hedge_after: float | str | None = None
    """Send a second, hedged request when the first has taken this many seconds, or
    ``"p95"`` (any percentile) of recent latencies; the first answer wins and the other is
    cancelled. Idempotent methods only. Off by default: both requests are paid for."""

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalise once so equal configs compare equal
        set_(self, "method", _check_str(self.method, "method").upper())
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        set_(self, "response_fields", _check_response_fields(self.response_fields))
        set_(self, "headers", _check_headers(self.headers))
        set_(self, "secret_headers", _check_secret_headers(self.secret_headers, self.headers))
        self._check_source()
        if self.not_found not in NOT_FOUND_POLICIES:
            raise ValueError(f"not_found must be 'null' or 'fail', got {self.not_found!r}")
        if self.key_field is not None:
            _check_str(self.key_field, "key_field")
        self._check_limits()
        self._check_requests()
        for name in ("connect_timeout", "first_byte_timeout", "read_timeout", "total_timeout"):
            value = getattr(self, name)
            if value is not None:
                set_(self, name, _positive_float(value, name))
        _check_int(self.max_response_bytes, "max_response_bytes", minimum=1)
        self._check_hedging()

    def _check_hedging(self) -> None:
        if self.hedge_after is None:
            return
        if isinstance(self.hedge_after, str) and not self.hedge_after.startswith("p"):
            try:  # "0.5" from a command line means seconds
                object.__setattr__(self, "hedge_after", float(self.hedge_after))
            except ValueError:
                pass  # hedge_percentile names the problem
        if self.batch_size is not None or self.method not in IDEMPOTENT_METHODS:
            method = "POST (batching)" if self.batch_size is not None else self.method
            raise ValueError(
                f"hedge_after: only idempotent methods ({', '.join(IDEMPOTENT_METHODS)}) may "
                f"be hedged, a second {method} could act twice"
            )
        self.hedge_delay_s, self.hedge_percentile  # noqa: B018 - parsing is the check

    @property
    def hedge_delay_s(self) -> float | None:
        """A fixed hedging delay (``hedge_after`` in seconds), else None."""
        if self.hedge_after is None or isinstance(self.hedge_after, str):
            return None
        return _positive_float(self.hedge_after, "hedge_after")

    @property
    def hedge_percentile(self) -> float | None:
        """The latency percentile to hedge after (``hedge_after="p95"`` gives 95.0)."""
        if not isinstance(self.hedge_after, str):
            return None
        match = _PERCENTILE.match(self.hedge_after)
        if match is None or not 0 < float(match["value"]) < 100:
            raise ValueError(
                f"hedge_after must be seconds or a percentile such as 'p95', "
                f"got {self.hedge_after!r}"
            )
        return float(match["value"])

    def _check_source(self) -> None:
        if self.token_env is not None and self.token_file is not None:
            raise ValueError("token_env and token_file: set at most one token source")
        if self.token_env is not None:
            _check_str(self.token_env, "token_env")
        if self.token_file is not None:
            _check_str(self.token_file, "token_file")

    def _check_limits(self) -> None:
        if self.requests_per_second is not None:
            rate = _positive_float(self.requests_per_second, "requests_per_second")
            object.__setattr__(self, "requests_per_second", rate)
        _check_int(self.partitions, "partitions", minimum=1)
        _check_int(self.capacity, "capacity", minimum=1)
        _check_int(self.throttle_window, "throttle_window", minimum=1)
        share = _positive_float(self.throttle_share, "throttle_share")
        if share > 1:
            raise ValueError(f"throttle_share must be a fraction in (0, 1], got {share!r}")
        _check_int(self.cache_size, "cache_size", minimum=0)
        if not isinstance(self.coalesce, bool):
            raise ValueError(f"coalesce must be true or false, got {self.coalesce!r}")

    def _check_requests(self) -> None:
        """The single-request or the batch-request settings, whichever mode is on."""
        if self.batch_size is None:
            if self.url_template is None:
                raise ValueError("url_template is required (unless batch_size is set)")
            self.compile_url()
            if self.body_template is not None:
                if self.method == "GET":
                    raise ValueError("body_template: a GET request has no body; use POST")
                try:
                    json.dumps(self.body_template, allow_nan=False)
                except (TypeError, ValueError) as exc:
                    raise ValueError(f"body_template must be JSON data: {exc}") from None
                self.compile_body()
            return
        _check_int(self.batch_size, "batch_size", minimum=1)
        batch_wait = _positive_float(self.batch_max_wait_s, "batch_max_wait_s")
        object.__setattr__(self, "batch_max_wait_s", batch_wait)
        if self.batch_url_template is None:
            raise ValueError("batch_url_template is required when batch_size is set")
        if self.key_field is None:
            raise ValueError("key_field is required when batch_size is set (the id sent)")
        if self.url_template is not None or self.body_template is not None:
            raise ValueError(
                "url_template/body_template: not used when batching; set batch_url_template"
            )
        if UrlTemplate(self.batch_url_template, "batch_url_template").fields:
            raise ValueError("batch_url_template must not contain {field} placeholders")
        _check_base_url(self.batch_url_template, "batch_url_template")
        _check_str(self.batch_request_key, "batch_request_key")
        _check_str(self.batch_result_id_field, "batch_result_id_field")
        if self.batch_error_field is not None:
            _check_str(self.batch_error_field, "batch_error_field")
        try:
            compile_path(self.batch_results_path)
        except JsonPathError as exc:
            raise ValueError(f"batch_results_path: {exc}") from None

    # -- compiled forms, used by the enricher -----------------------------------------

    def compile_url(self) -> UrlTemplate:
        assert self.url_template is not None
        try:
            template = UrlTemplate(self.url_template, "url_template", self.key_field)
        except TemplateError as exc:
            raise ValueError(str(exc)) from None
        _check_base_url(self.url_template, "url_template")
        return template

    def compile_body(self) -> BodyTemplate:
        try:
            return BodyTemplate(self.body_template, "body_template", self.key_field)
        except TemplateError as exc:
            raise ValueError(str(exc)) from None

    def record_fields(self) -> list[str]:
        """The record fields a call needs (templates, batch key), for checking an input
        schema on the driver before any task fails on a missing column."""
        if self.batch_size is not None:
            assert self.key_field is not None
            return [self.key_field]
        fields = self.compile_url().fields
        if self.body_template is not None:
            fields += self.compile_body().fields
        return sorted(set(fields))

    @property
    def rate_per_partition(self) -> float | None:
        """This partition's share of the job's request budget."""
        if self.requests_per_second is None:
            return None
        return self.requests_per_second / self.partitions

    # -- serialisation ----------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HttpEnricherConfig:
        """The inverse of :meth:`to_dict`; unknown keys are a ValueError (typos)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"config must be a JSON object, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown config fields: {', '.join(unknown)}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready plain data; holds where the token comes from, never the token."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["response_fields"] = {
            name: {"path": spec.path, "type": spec.type}
            for name, spec in self.response_fields.items()
        }
        data["headers"] = dict(self.headers)
        data["secret_headers"] = dict(self.secret_headers)
        data["body_template"] = copy.deepcopy(self.body_template)
        return data

    def fingerprint(self) -> str:
        """sha256 of what the enrichment computes (stable across runs).

        Moving the token to another variable or file, or tuning speed and timeouts, is
        not a change of enrichment: a run resumed with more capacity still resumes.
        """
        data = self.to_dict()
        for name in _NOT_IDENTITY:
            del data[name]
        canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return hashlib.sha256(canonical.encode()).hexdigest()


def _check_str(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    return value


def _check_int(value: Any, name: str, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _positive_float(value: Any, name: str) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def _check_base_url(template: str, name: str) -> None:
    """Scheme and host must be literal: one config, one upstream, one connection pool."""
    head = template.split("{", 1)[0]
    parts = urlsplit(head)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{name} must start with http:// or https:// and a host, got {template!r}")
    try:
        parts.port  # noqa: B018 - parsing the port is the check
    except ValueError:
        raise ValueError(f"{name} has an invalid port, got {template!r}") from None
    if "{" in template and not parts.path:
        raise ValueError(f"{name}: the host must not contain placeholders, got {template!r}")


def _check_headers(headers: Any) -> dict[str, str]:
    if not isinstance(headers, Mapping):
        raise ValueError(f"headers must be a mapping of strings, got {headers!r}")
    for name, value in headers.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise ValueError(f"headers must map strings to strings, got {name!r}: {value!r}")
        if any(c in name + value for c in "\r\n") or not name:
            raise ValueError(f"headers: {name!r} has an empty name or a line break")
        if name.lower() in ("authorization", "proxy-authorization"):
            raise ValueError(
                f"headers: {name} must not be set here (the config is not secret); "
                "use token_env or token_file"
            )
    return dict(headers)


def _check_secret_headers(secret_headers: Any, headers: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(secret_headers, Mapping):
        raise ValueError(
            f"secret_headers must map header names to variables, got {secret_headers!r}"
        )
    for name, variable in secret_headers.items():
        if not isinstance(name, str) or not name or any(c in name for c in "\r\n:"):
            raise ValueError(f"secret_headers: {name!r} is not a header name")
        if name.lower() in {h.lower() for h in headers} or name.lower() == "authorization":
            raise ValueError(f"secret_headers: {name} is also set elsewhere (headers or token)")
        _check_str(variable, f"secret_headers.{name}")
    return dict(secret_headers)


def _check_response_fields(fields: Any) -> dict[str, ResponseField]:
    if not isinstance(fields, Mapping) or not fields:
        raise ValueError("response_fields must map at least one output name to a JSON path")
    parsed = {}
    for name, spec in fields.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"response_fields: output names must be strings, got {name!r}")
        try:
            parsed[name] = ResponseField.parse(spec)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"response_fields.{name}: {exc}") from None
    return parsed
