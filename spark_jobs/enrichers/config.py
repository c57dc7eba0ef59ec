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
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from spark_jobs import defaults

from .batch_config import BatchConfig, batch_identity, nest_flat_options
from .concurrency import CONCURRENCIES, Concurrency
from .response_field import ResponseField, check_response_fields
from .templates import BodyTemplate, TemplateError, UrlTemplate
from .validation import (
    IDENTITY,
    check_base_url,
    check_choice,
    check_headers,
    check_int,
    check_secret_headers,
    check_str,
    positive_float,
)

Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
NotFoundPolicy = Literal["null", "fail"]
METHODS: tuple[Method, ...] = get_args(Method)
NOT_FOUND_POLICIES: tuple[NotFoundPolicy, ...] = get_args(NotFoundPolicy)

IDEMPOTENT_METHODS: tuple[Method, ...] = ("GET", "PUT", "DELETE")
_PERCENTILE = re.compile(r"^p(?P<value>\d{1,2}(?:\.\d+)?)$")


@dataclass(frozen=True)
class HttpEnricherConfig:
    """How to enrich a record with one HTTP call (or one batched call for many records).

    Output: a dict with one key per ``response_fields`` entry. In batch mode the paths
    apply to each item of the response list rather than to the whole response.
    """

    url_template: str | None = field(default=None, metadata=IDENTITY)
    """``http(s)://host/path/{field}``; required unless batching. Values are URL-encoded."""
    response_fields: Mapping[str, ResponseField] = field(default_factory=dict, metadata=IDENTITY)
    """Output name -> ResponseField (``from_dict`` also takes ``["$.path", "type"]``)."""
    method: str = field(default="GET", metadata=IDENTITY)
    """One of ``METHODS``, any case."""
    body_template: Any = field(default=None, metadata=IDENTITY)
    """JSON body, a mapping (or list); ``{field}`` placeholders in its strings are filled
    from the record (see ``templates.py``: a lone placeholder keeps the JSON type)."""
    headers: Mapping[str, str] = field(default_factory=dict, metadata=IDENTITY)
    token_env: str | None = None
    """Environment variable holding the bearer token (read on the executor)."""
    token_file: str | None = None
    """File holding the bearer token (read on the executor)."""
    secret_headers: Mapping[str, str] = field(default_factory=dict)
    """Header name -> environment variable holding its value, for API keys sent in a
    header other than Authorization (``{"X-Api-Key": "CRM_API_KEY"}``). Read on the
    executor like the token, and redacted from every message."""
    not_found: NotFoundPolicy = field(default="null", metadata=IDENTITY)
    """On 404: every output field None ("null") or a permanent failure ("fail")."""
    key_field: str | None = field(default=None, metadata=IDENTITY)
    """Record field identifying a record: named in error messages, sent when batching."""
    requests_per_second: float | None = None
    """Request budget of the whole job (retries included); None for no limit."""
    partitions: int = 1
    """How many partitions run at once and share ``requests_per_second`` equally."""
    capacity: int = defaults.CAPACITY
    """Most requests in flight per partition; also the connection pool's per-host limit."""
    concurrency: Concurrency = "fixed"
    """``fixed``: ``capacity`` in flight whatever the answers (throttling is the rate
    controller's); ``latency``: the limit, up to ``capacity``, that keeps the latency near
    the unloaded one, for a server that queues instead of throttling (``concurrency.py``;
    ``model.provider: self-hosted`` sets it)."""
    throttle_window: int = defaults.THROTTLE_WINDOW
    """How many recent answers decide whether throttling is sustained."""
    throttle_share: float = defaults.THROTTLE_SHARE
    """Share of 429s in the window that means a rate limit (as do headers saying the quota
    is spent): it cuts the rate and pauses every send for the ``Retry-After``. Isolated
    429s only delay their own record."""
    cache_size: int = 10_000
    """Final answers kept per partition, by request; 0 disables the cache."""
    coalesce: bool = True
    """Identical requests in flight at once share one call."""
    batch: BatchConfig | None = field(default=None, metadata=IDENTITY)
    """Many records per request (``BatchConfig``, or a mapping of its fields); None
    disables batching. In batch mode ``response_fields`` apply to each result item."""
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
    max_response_bytes: int = defaults.MAX_RESPONSE_BYTES
    """Largest response body accepted, counted after decompression; a larger one makes
    the record a dead letter naming the limit, and reading stops there."""
    hedge_after: float | str | None = None
    """Send a second, hedged request when the first has taken this many seconds, or
    ``"p95"`` (any percentile) of recent latencies; the first answer wins and the other is
    cancelled. Idempotent methods only. Off by default: both requests are paid for."""
    resend_stragglers: bool = False
    """Once a partition's input has ended, cut an attempt gone silent that later ones
    overtook and send it again (``stragglers.py``). Idempotent methods only, and off by
    default: the cut call may still be billed, so the provider charges for both."""
    follow_redirects: defaults.RedirectPolicy = defaults.FOLLOW_REDIRECTS
    """``none`` (a 3xx is a dead letter) or ``same-origin`` (followed, each hop a call)."""

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalise once so equal configs compare equal
        set_(self, "method", check_str(self.method, "method").upper())
        check_choice(self.method, METHODS, "method")
        set_(self, "response_fields", check_response_fields(self.response_fields))
        set_(self, "batch", BatchConfig.parse(self.batch))
        set_(self, "headers", check_headers(self.headers))
        set_(self, "secret_headers", check_secret_headers(self.secret_headers, self.headers))
        self._check_source()
        check_choice(self.not_found, NOT_FOUND_POLICIES, "not_found")
        check_choice(self.follow_redirects, defaults.REDIRECT_POLICIES, "follow_redirects")
        if self.key_field is not None:
            check_str(self.key_field, "key_field")
        self._check_limits()
        self._check_requests()
        for name in ("connect_timeout", "first_byte_timeout", "read_timeout", "total_timeout"):
            value = getattr(self, name)
            if value is not None:
                set_(self, name, positive_float(value, name))
        check_int(self.max_response_bytes, "max_response_bytes", minimum=1)
        self._check_hedging()
        self._check_stragglers()

    def _check_idempotent(self, option: str, what: str) -> None:
        """``option`` only for a method that may act twice (``what``: what is sent)."""
        if self.batch is not None or self.method not in IDEMPOTENT_METHODS:
            method = "POST (batching)" if self.batch is not None else self.method
            raise ValueError(
                f"{option}: only idempotent methods ({', '.join(IDEMPOTENT_METHODS)}) may "
                f"{what}, a second {method} could act twice and is paid twice"
            )

    def _check_stragglers(self) -> None:
        if not isinstance(self.resend_stragglers, bool):
            raise ValueError(
                f"resend_stragglers must be true or false, got {self.resend_stragglers!r}"
            )
        if self.resend_stragglers:
            self._check_idempotent("resend_stragglers", "be sent again as stragglers")

    def _check_hedging(self) -> None:
        if self.hedge_after is None:
            return
        if isinstance(self.hedge_after, str) and not self.hedge_after.startswith("p"):
            try:  # "0.5" from a command line means seconds
                object.__setattr__(self, "hedge_after", float(self.hedge_after))
            except ValueError:
                pass  # hedge_percentile names the problem
        self._check_idempotent("hedge_after", "be hedged")
        self.hedge_delay_s, self.hedge_percentile  # noqa: B018 - parsing is the check

    @property
    def hedge_delay_s(self) -> float | None:
        """A fixed hedging delay (``hedge_after`` in seconds), else None."""
        if self.hedge_after is None or isinstance(self.hedge_after, str):
            return None
        return positive_float(self.hedge_after, "hedge_after")

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
        for name in ("token_env", "token_file"):
            if getattr(self, name) is not None:
                check_str(getattr(self, name), name)

    def _check_limits(self) -> None:
        if self.requests_per_second is not None:
            rate = positive_float(self.requests_per_second, "requests_per_second")
            object.__setattr__(self, "requests_per_second", rate)
        check_int(self.partitions, "partitions", minimum=1)
        check_int(self.capacity, "capacity", minimum=1)
        check_choice(self.concurrency, CONCURRENCIES, "concurrency")
        check_int(self.throttle_window, "throttle_window", minimum=1)
        share = positive_float(self.throttle_share, "throttle_share")
        if share > 1:
            raise ValueError(f"throttle_share must be a fraction in (0, 1], got {share!r}")
        check_int(self.cache_size, "cache_size", minimum=0)
        if not isinstance(self.coalesce, bool):
            raise ValueError(f"coalesce must be true or false, got {self.coalesce!r}")

    def _check_requests(self) -> None:
        """The single-request or the batch-request settings, whichever mode is on."""
        if self.batch is not None:
            if self.key_field is None:
                raise ValueError("key_field is required when batch_size is set (the id sent)")
            if self.url_template is not None or self.body_template is not None:
                raise ValueError(
                    "url_template/body_template: not used when batching; set batch_url_template"
                )
            return
        if self.url_template is None:
            raise ValueError("url_template is required (unless batch_size is set)")
        self.compile_url()
        if self.body_template is None:
            return
        if self.method == "GET":
            raise ValueError("body_template: a GET request has no body; use POST")
        if not isinstance(self.body_template, Mapping | list):
            raise ValueError(
                "body_template must be a mapping (a JSON object) whose string values may hold "
                '{field} placeholders, e.g. {"street": "{street}", "limit": 1}; got a '
                f"{type(self.body_template).__name__}: write the object itself, not a string"
            )
        try:
            json.dumps(self.body_template, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"body_template must be JSON data: {exc}") from None
        self.compile_body()

    # -- compiled forms, used by the enricher -----------------------------------------

    def compile_url(self) -> UrlTemplate:
        assert self.url_template is not None
        try:
            template = UrlTemplate(self.url_template, "url_template", self.key_field)
        except TemplateError as exc:
            raise ValueError(str(exc)) from None
        check_base_url(self.url_template, "url_template")
        return template

    def compile_body(self) -> BodyTemplate:
        try:
            return BodyTemplate(self.body_template, "body_template", self.key_field)
        except TemplateError as exc:
            raise ValueError(str(exc)) from None

    @property
    def rate_per_partition(self) -> float | None:
        """This partition's share of the job's request rate (while it runs)."""
        if self.requests_per_second is None:
            return None
        return self.requests_per_second / self.partitions

    # -- serialisation ----------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HttpEnricherConfig:
        """The inverse of :meth:`to_dict`; unknown keys are a ValueError (typos)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"config must be a JSON object, got {type(data).__name__}")
        data = nest_flat_options(data)
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
        data["headers"], data["secret_headers"] = dict(self.headers), dict(self.secret_headers)
        data["body_template"] = copy.deepcopy(self.body_template)
        data["batch"] = dataclasses.asdict(self.batch) if self.batch is not None else None
        return data

    def fingerprint(self) -> str:
        """sha256 of what the enrichment computes (stable across runs).

        Moving the token to another variable or file, or tuning speed and timeouts, is
        not a change of enrichment: a run resumed with more capacity still resumes.
        """
        plain = self.to_dict()
        data = {
            spec.name: plain[spec.name]
            for spec in dataclasses.fields(self)
            if spec.metadata.get("fingerprint") and spec.name != "batch"
        }
        data.update(batch_identity(self.batch))  # flat, as hashed before the nesting
        canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return hashlib.sha256(canonical.encode()).hexdigest()
