"""What to ask a model endpoint for each record: ``ModelConfig`` (the spec's ``model:``).

Plain data with ``from_dict``/``to_dict``, validated when built on the driver, each error
naming the field (``model.output_schema at $.tags: ...``). The fields marked ``IDENTITY``
change what is computed (model, prompt, parameters, schema), so a change of one makes a
resumed run start fresh; limits and prices are tuning.

The endpoint itself is the job's ``url_template`` and its key the HTTP enricher's secret
sources (``--token-env`` for OpenAI-compatible ``Authorization: Bearer``,
``--secret-header x-api-key=VAR`` for Anthropic), so an Airflow connection reaches it the
way it reaches any API.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import pyarrow as pa

from spark_jobs.defaults import ANTHROPIC_VERSION

from ..templates import TemplateError, parse_template
from ..validation import IDENTITY, check_choice, check_int, check_str, positive_float
from .output_schema import columns

Api = Literal["chat", "embeddings", "anthropic"]
APIS: tuple[Api, ...] = get_args(Api)
Provider = Literal["openai", "azure", "anthropic", "self-hosted"]
PROVIDERS: tuple[Provider, ...] = get_args(Provider)
Mode = Literal["online", "batch"]
MODES: tuple[Mode, ...] = get_args(Mode)
BATCH_PRICE = 0.5
"""What a request costs through a provider's batch API, of its online price (OpenAI's
Batch API and Anthropic's Message Batches: half)."""
DEFAULT_COLUMN = {"chat": "answer", "anthropic": "answer", "embeddings": "embedding"}
TOKEN_COLUMNS = ("prompt_tokens", "completion_tokens")
"""Every answer's usage, one column each (0 completion tokens for embeddings)."""
COMPLETION_RESERVE = 256
"""Tokens an answer is reserved before its usage is known, without ``max_tokens``."""
LIMITS_WINDOW_S = 60.0
"""The period of the limits providers state in their headers (OpenAI, Anthropic: a minute)."""
INPUTS_PER_REQUEST: dict[Provider, int] = {
    "openai": 2048,
    "azure": 2048,
    "self-hosted": 32,
    "anthropic": 1,
}
"""The most embeddings inputs a request carries by default, as each provider documents:
OpenAI's and Azure OpenAI's "max array size is 2048"; Text Embeddings Inference's
``--max-client-batch-size`` default (vLLM takes any list); Anthropic has no embeddings."""
TOKENS_PER_REQUEST: dict[Provider, int] = {
    "openai": 300_000,
    "azure": 8_192,
    "self-hosted": 16_384,
    "anthropic": 8_192,
}
"""The most tokens an embeddings request's inputs sum to by default: OpenAI's 300 000
"summed across all inputs in a single request"; Azure OpenAI's "the entire array of
inputs sent in a single API call is subject to the max token limit of 8192"; Text
Embeddings Inference's ``--max-batch-tokens`` default."""
INPUT_WAIT_S = 0.05
"""How long an embeddings request waits for more inputs before it goes part-full."""


@dataclass(frozen=True)
class ModelConfig:
    """One model call per record: ``prompt`` filled from the record, typed answer out."""

    model: str = field(metadata=IDENTITY)
    prompt: str = field(metadata=IDENTITY)
    """``{field}`` placeholders, the rules of URL and body templates (``templates.py``)."""
    api: Api = field(default="chat", metadata=IDENTITY)
    """``chat`` (OpenAI chat completions), ``embeddings`` or ``anthropic`` (messages)."""
    system: str | None = field(default=None, metadata=IDENTITY)
    parameters: Mapping[str, Any] = field(default_factory=dict, metadata=IDENTITY)
    """Sent as they are: ``temperature``, ``max_tokens``, ``seed``..."""
    output_schema: Mapping[str, Any] | None = field(default=None, metadata=IDENTITY)
    """A JSON schema of an object: one typed column per property (``output_schema.py``),
    sent as ``response_format`` to chat endpoints; answers that do not fit it are dead
    letters (``InvalidOutputError``)."""
    output_column: str | None = field(default=None, metadata=IDENTITY)
    """The column of a free-text answer or an embedding (``DEFAULT_COLUMN``)."""
    response_format: bool = field(default=True, metadata=IDENTITY)
    """Send ``output_schema`` as ``response_format`` (chat); off for servers without it."""
    requests_per_minute: float | None = None
    """The job's request limit; else learned from the answers' headers."""
    tokens_per_minute: float | None = None
    """The job's token limit (prompt and completion); else learned from the headers."""
    limits_window_s: float = LIMITS_WINDOW_S
    """The period of the limits in the provider's headers, in seconds."""
    provider: Provider | None = None
    """Whose limits and charging rules the pacing follows (``pacing.py``): ``openai``,
    ``azure``, ``anthropic`` or ``self-hosted`` (no limits: the concurrency follows the
    server's latency instead, ``concurrency.LatencyLimit``); by default ``anthropic`` for
    the messages API, else ``openai`` (what OpenAI-compatible gateways copy)."""
    completion_tokens: int | None = None
    """Tokens reserved for an answer until its usage comes (default ``max_tokens``, else
    ``COMPLETION_RESERVE``)."""
    price_input_per_million: float | None = None
    price_output_per_million: float | None = None
    anthropic_version: str = ANTHROPIC_VERSION
    mode: Mode = "online"
    """``online`` (a call per record) or ``batch`` (the provider's batch API,
    ``batch_calls.py``): the same answers, so not part of the fingerprint; a run may
    switch and resume."""
    batch_size: int | None = None
    """The most requests a batch holds (default the provider's limit)."""
    batch_wait_s: float = 1.0
    """A batch is created once it is full, or this long after its first request."""
    batch_poll_s: float = 30.0
    """How often a running batch is looked at."""
    batch_resend: Mode = "batch"
    """Where a request goes that its batch never ran (expired, cancelled): a new batch,
    or ``online`` (a call of its own, at the online price)."""
    inputs_per_request: int | None = None
    """Embeddings: the most inputs (records) one request carries (by default the
    provider's bound, ``INPUTS_PER_REQUEST``); 1 sends one input a request."""
    tokens_per_request: int | None = None
    """Embeddings: the most tokens one request's inputs sum to (``TOKENS_PER_REQUEST``),
    by their estimate; an input over it on its own goes alone."""
    input_wait_s: float = INPUT_WAIT_S
    """Embeddings: how long a request waits for more inputs before it goes part-full."""

    def __post_init__(self) -> None:
        check_str(self.model, "model.model")
        check_choice(self.api, APIS, "model.api")
        if self.provider is None:
            default = "anthropic" if self.api == "anthropic" else "openai"
            object.__setattr__(self, "provider", default)
        check_choice(self.provider, PROVIDERS, "model.provider")
        for name in ("prompt", "system"):
            if name == "prompt" or self.system is not None:
                try:
                    parse_template(check_str(getattr(self, name), f"model.{name}"), f"model.{name}")
                except TemplateError as error:
                    raise ValueError(str(error)) from None
        if not isinstance(self.parameters, Mapping):
            raise ValueError(f"model.parameters must be a mapping, got {self.parameters!r}")
        if self.api == "anthropic" and "max_tokens" not in self.parameters:
            raise ValueError("model.parameters.max_tokens is required by the messages API")
        if self.output_schema is not None:
            if self.api == "embeddings":
                raise ValueError("model.output_schema: embeddings have no structured output")
            try:
                columns(self.output_schema)
            except ValueError as error:
                raise ValueError(f"model.{error}") from None
        for name in (
            "requests_per_minute",
            "tokens_per_minute",
            "price_input_per_million",
            "price_output_per_million",
        ):
            if getattr(self, name) is not None and getattr(self, name) != 0:
                object.__setattr__(self, name, positive_float(getattr(self, name), f"model.{name}"))
        positive_float(self.limits_window_s, "model.limits_window_s")
        if self.completion_tokens is not None:
            check_int(self.completion_tokens, "model.completion_tokens", minimum=0)
        if self.output_column is not None:
            check_str(self.output_column, "model.output_column")
        self._check_mode()
        self._check_input_batching()

    def _check_mode(self) -> None:
        check_choice(self.mode, MODES, "model.mode")
        if self.batch_size is not None:
            check_int(self.batch_size, "model.batch_size", minimum=1)
        positive_float(self.batch_wait_s, "model.batch_wait_s")
        positive_float(self.batch_poll_s, "model.batch_poll_s")
        check_choice(self.batch_resend, MODES, "model.batch_resend")
        if self.mode == "batch" and self.provider not in ("openai", "anthropic"):
            raise ValueError(
                f"model.mode: batch works with the openai and anthropic batch APIs, "
                f"not model.provider {self.provider}"
            )

    def _check_input_batching(self) -> None:
        for name in ("inputs_per_request", "tokens_per_request"):
            value = getattr(self, name)
            if value is None:
                continue
            check_int(value, f"model.{name}", minimum=1)
            if self.api != "embeddings" and value != 1:
                raise ValueError(f"model.{name}: only embeddings take many inputs a request")
        object.__setattr__(
            self, "input_wait_s", positive_float(self.input_wait_s, "model.input_wait_s")
        )

    # -- what the job needs --------------------------------------------------------------

    def output_types(self) -> dict[str, pa.DataType]:
        """The columns each record gains, in order, with their Arrow types."""
        if self.output_schema is not None:
            found = columns(self.output_schema)
        elif self.api == "embeddings":
            found = {self.column: pa.list_(pa.float32())}
        else:
            found = {self.column: pa.string()}
        clash = set(found) & set(TOKEN_COLUMNS)
        if clash:
            raise ValueError(f"model.output_schema: {sorted(clash)} are the usage columns")
        return {**found, **dict.fromkeys(TOKEN_COLUMNS, pa.int64())}

    @property
    def column(self) -> str:
        return self.output_column or DEFAULT_COLUMN[self.api]

    @property
    def completion_reserve(self) -> int:
        if self.api == "embeddings":
            return 0
        if self.completion_tokens is not None:
            return self.completion_tokens
        stated = self.parameters.get("max_tokens") or self.parameters.get("max_completion_tokens")
        return stated if isinstance(stated, int) and stated > 0 else COMPLETION_RESERVE

    @property
    def inputs_a_request(self) -> int:
        """How many inputs one request carries at most: 1 but for embeddings."""
        if self.api != "embeddings":
            return 1
        assert self.provider is not None  # set in __post_init__
        return self.inputs_per_request or INPUTS_PER_REQUEST[self.provider]

    @property
    def tokens_a_request(self) -> int:
        """How many tokens one embeddings request's inputs sum to at most."""
        assert self.provider is not None  # set in __post_init__
        return self.tokens_per_request or TOKENS_PER_REQUEST[self.provider]

    @property
    def priced(self) -> bool:
        return self.price_input_per_million is not None or self.price_output_per_million is not None

    def cost(
        self, prompt_tokens: float, completion_tokens: float, mode: Mode | None = None
    ) -> float:
        """What the tokens cost at the spec's prices per million (0 for an unset price),
        at ``BATCH_PRICE`` of them when paid through a batch API (``mode``, else the
        config's own)."""
        share = BATCH_PRICE if (mode or self.mode) == "batch" else 1.0
        return (
            share
            * (
                prompt_tokens * (self.price_input_per_million or 0.0)
                + completion_tokens * (self.price_output_per_million or 0.0)
            )
            / 1e6
        )

    # -- serialisation -------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelConfig:
        if not isinstance(data, Mapping):
            raise ValueError(f"model must be a mapping, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"model: unknown field(s) {', '.join(unknown)}")
        missing = [name for name in ("model", "prompt") if name not in data]
        if missing:
            raise ValueError(f"model: {', '.join(missing)} required")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["parameters"] = dict(self.parameters)
        plain: dict[str, Any] = json.loads(json.dumps(data))
        return plain

    def fingerprint(self) -> str:
        """sha256 of the fields that change what is computed."""
        plain = self.to_dict()
        data = {f.name: plain[f.name] for f in dataclasses.fields(self) if f.metadata}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
