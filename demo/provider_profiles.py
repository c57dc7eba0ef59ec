"""Provider profiles of the demo model endpoint: how each provider charges a call, which
limits refuse it, what its answers' headers say and what its errors look like.

Each profile follows its provider's documentation (the limit shapes are ``model_limits.py``,
the self-hosted server's queue is ``batch_scheduler.py``; ``model_api.py`` serves them all):

* ``fixed-window`` (the default): the demo's own windows, prompt and actual completion
  counted when a call arrives, ``Retry-After`` on 429 (``model_limits.LimitWindow``).
* ``openai``: requests and tokens per minute as continuously refilled buckets; a request
  is charged at admission its prompt estimate plus ``max_tokens`` (``max_completion_tokens``;
  absent: ``DEFAULT_MAX_TOKENS``), never refunded; ``x-ratelimit-{limit,remaining,reset}-
  {requests,tokens}`` with Go-style durations until the bucket is full again; 429
  ``rate_limit_exceeded`` saying "Please try again in 287ms", no ``Retry-After`` unless
  asked (https://platform.openai.com/docs/guides/rate-limits,
  https://platform.openai.com/docs/guides/error-codes: ``insufficient_quota``,
  ``invalid_api_key``, ``model_not_found``, 500, 503 "The engine is currently overloaded").
* ``azure``: limits per deployment; TPM counted per minute from the prompt and
  ``max_tokens`` when the request is received, RPM set at 6 per 1 000 TPM and evaluated over
  10 s windows (a sixth of it each); ``x-ratelimit-remaining-{requests,tokens}``; 429 with
  ``retry-after-ms`` and ``retry-after`` and Azure's ``{"error": {"code": "429", ...}}``
  (https://learn.microsoft.com/azure/ai-services/openai/how-to/quota).
* ``anthropic``: requests, input tokens and output tokens limited apart, each a bucket;
  output charged ``max_tokens`` at admission and the unused part given back when the
  answer ends; ``anthropic-ratelimit-{requests,input-tokens,output-tokens,tokens}-
  {limit,remaining,reset}`` with RFC 3339 resets (the time the bucket is full again),
  token counts rounded to the nearest thousand; 429 ``rate_limit_error`` with
  ``retry-after`` seconds; 529 ``overloaded_error``; 402 ``billing_error``, 401, 403, 404
  (https://docs.anthropic.com/en/api/rate-limits, https://docs.anthropic.com/en/api/errors).
* ``self-hosted``: vLLM, llama.cpp's server, TGI: no limits, no rate headers; the batch
  and its queue decide the latency (``batch_scheduler.py``), 503 when a bounded queue is full.

An account state (``ACCOUNTS``) makes every call fail as that provider fails a spent,
unauthorised or wrong account; ``Faults`` answers a seeded share of calls 500 and 503/529
(a faulted or refused call is charged nothing).
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar, Protocol

from demo.batch_scheduler import BatchScheduler, BatchServing
from demo.model_limits import LimitWindow, ModelLimits, TokenBucket

ACCOUNTS = ("ok", "spent", "invalid-key", "unknown-model", "no-permission")
"""Account states: a working key, a spent balance, a wrong key, a model the key does not
have, a key without permission (Anthropic's 403)."""

DEFAULT_MAX_TOKENS = 4096
"""What OpenAI and Azure charge a chat request without ``max_tokens``: our choice of a
model's common output maximum, since their limiters reserve the request's maximum output
when none is given (the documented estimate is prompt plus ``max_tokens``)."""

ORGANIZATION = "org-demo"
_OPENAI_LIMITS_URL = "https://platform.openai.com/account/rate-limits"


@dataclass(frozen=True)
class Call:
    """One call as a profile sees it: what it asks for and what its answer will be."""

    api: str
    """``chat``, ``embeddings`` or ``messages``."""
    model: str
    deployment: str
    """Azure's deployment (the path's, else the body's model); the model elsewhere."""
    prompt_tokens: int
    completion_tokens: int
    """The answer's (deterministic, so known before it is served)."""
    max_tokens: int | None


@dataclass(frozen=True)
class Refusal:
    """A call answered with an error: its status, body, headers and why."""

    status: int
    body: Mapping[str, Any]
    headers: Mapping[str, str]
    outcome: str
    """Why: ``throttled``, ``server_error``, ``overloaded``, ``account``, ``invalid`` or
    ``unavailable`` (a ``/stats`` counter each)."""


@dataclass(frozen=True)
class Admission:
    """A call let through: what it was charged per limit, and the headers at admission."""

    charged: Mapping[str, int]
    headers: Mapping[str, str]


class ProviderProfile(Protocol):
    """What the server asks of a profile for each call, in this order."""

    name: ClassVar[str]
    minute_s: float

    def elapsed(self) -> float:
        """Seconds since the profile's limits started (the timeline's time)."""

    def limits(self) -> dict[str, int]:
        """Each limit per minute (``minute_s``), by the name ``charged`` uses."""

    def admit(self, call: Call) -> Admission | Refusal:
        """Charge the call, or refuse it."""

    async def serve(self, call: Call, latency_s: float) -> Refusal | None:
        """Take the call's service time; a refusal if the server cannot serve it."""

    def finish(self, call: Call, admission: Admission) -> tuple[dict[str, str], dict[str, int]]:
        """The answer's headers and the call's final charges, when the answer ends."""

    def stats(self) -> dict[str, Any]:
        """What this profile adds to ``/stats``."""


@dataclass
class Faults:
    """A seeded, deterministic share of calls answered 500 and 503 (Anthropic: 529)."""

    server_errors: float = 0.0
    overloaded: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("server_errors", "overloaded"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be a share in [0, 1], got {getattr(self, name)!r}")
        if self.server_errors + self.overloaded > 1.0:
            raise ValueError("server_errors and overloaded add up to more than every call")
        self._random = random.Random(self.seed)

    def draw(self) -> str | None:
        """``server_error``, ``overloaded`` or None (served) for the next call."""
        pick = self._random.random()
        if pick < self.server_errors:
            return "server_error"
        return "overloaded" if pick < self.server_errors + self.overloaded else None


def go_duration(seconds: float) -> str:
    """``seconds`` as Go's ``time.Duration`` prints it, to the millisecond (OpenAI's resets
    and "try again in": ``6m0s``, ``1.5s``, ``287ms``)."""
    ms = max(0, round(seconds * 1000))
    if ms < 1000:
        return f"{ms}ms" if ms else "0s"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    text = f"{rest / 1000:.3f}".rstrip("0").rstrip(".") + "s"
    if hours or minutes:
        text = f"{minutes}m{text}"
    return f"{hours}h{text}" if hours else text


def _check_account(account: str, allowed: tuple[str, ...], profile: str) -> None:
    if account not in allowed:
        raise ValueError(f"the {profile} profile has no account state {account!r}: {allowed}")


class _Served:
    """Service time and final headers of the rate-limited profiles: the endpoint's fixed
    latency, and the headers stated at admission."""

    async def serve(self, call: Call, latency_s: float) -> Refusal | None:
        if latency_s:
            await asyncio.sleep(latency_s)
        return None

    def finish(self, call: Call, admission: Admission) -> tuple[dict[str, str], dict[str, int]]:
        return dict(admission.headers), dict(admission.charged)

    def stats(self) -> dict[str, Any]:
        return {}


@dataclass
class FixedWindowProfile(_Served):
    """The demo's original endpoint: fixed windows, prompt plus actual completion counted
    at arrival (``model_limits.LimitWindow`` has the headers and ``Retry-After``)."""

    name: ClassVar[str] = "fixed-window"
    window_limits: ModelLimits = field(default_factory=ModelLimits)
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self.window = LimitWindow(self.window_limits, self.clock)
        self.minute_s = self.window_limits.window_s

    def elapsed(self) -> float:
        return self.window.elapsed()

    def limits(self) -> dict[str, int]:
        given = {"requests": self.window_limits.requests, "tokens": self.window_limits.tokens}
        return {name: limit for name, limit in given.items() if limit is not None}

    def admit(self, call: Call) -> Admission | Refusal:
        tokens = call.prompt_tokens + call.completion_tokens
        ok, headers = self.window.admit(tokens)
        if not ok:
            error = {"error": {"type": "rate_limit_error", "message": "rate limit reached"}}
            return Refusal(429, error, headers, "throttled")
        return Admission({"requests": 1, "tokens": tokens}, headers)


def openai_error(message: str, type_: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


def _openai_account(call: Call, account: str) -> Refusal | None:
    """OpenAI's (and Azure's) answer to every call of a spent, unauthorised or wrong account."""
    if account == "spent":
        message = (
            "You exceeded your current quota, please check your plan and billing details. For"
            " more information on this error, read the docs:"
            " https://platform.openai.com/docs/guides/error-codes/api-errors."
        )
        return Refusal(429, openai_error(message, *("insufficient_quota",) * 2), {}, "account")
    if account == "invalid-key":
        message = (
            "Incorrect API key provided. You can find your API key at"
            " https://platform.openai.com/account/api-keys."
        )
        body = openai_error(message, "invalid_request_error", "invalid_api_key")
        return Refusal(401, body, {}, "account")
    if account == "unknown-model":
        message = f"The model `{call.model}` does not exist or you do not have access to it."
        body = openai_error(message, "invalid_request_error", "model_not_found")
        return Refusal(404, body, {}, "account")
    return None


def _openai_fault(faults: Faults) -> Refusal | None:
    fault = faults.draw()
    if fault == "server_error":
        message = "The server had an error while processing your request. Sorry about that!"
        return Refusal(500, openai_error(message, "server_error", None), {}, fault)
    if fault == "overloaded":
        message = "The engine is currently overloaded, please try again later."
        return Refusal(503, openai_error(message, "server_error", None), {}, fault)
    return None


def _estimated_charge(call: Call, default_max_tokens: int) -> int:
    """OpenAI's and Azure's estimate at admission: the prompt plus the most the answer may
    be (``max_tokens``, or the default); an embedding generates nothing."""
    if call.api == "embeddings":
        return call.prompt_tokens
    most = call.max_tokens if call.max_tokens is not None else default_max_tokens
    return call.prompt_tokens + most


_OPENAI_LIMIT_NAMES = {"requests": "requests per min (RPM)", "tokens": "tokens per min (TPM)"}


@dataclass
class OpenAIProfile(_Served):
    """OpenAI: continuously refilled request and token buckets, charged at admission."""

    name: ClassVar[str] = "openai"
    requests: int | None = None
    tokens: int | None = None
    minute_s: float = 60.0
    default_max_tokens: int = DEFAULT_MAX_TOKENS
    retry_after: bool = False
    """Send ``Retry-After`` on a 429 (OpenAI's answers usually carry none)."""
    account: str = "ok"
    faults: Faults = field(default_factory=Faults)
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        _check_account(self.account, ACCOUNTS[:4], self.name)
        self._started = self.clock()
        self.buckets = {
            name: TokenBucket(limit, self.minute_s, self.clock)
            for name, limit in (("requests", self.requests), ("tokens", self.tokens))
            if limit is not None
        }

    def elapsed(self) -> float:
        return self.clock() - self._started

    def limits(self) -> dict[str, int]:
        return {name: bucket.capacity for name, bucket in self.buckets.items()}

    def admit(self, call: Call) -> Admission | Refusal:
        refusal = _openai_account(call, self.account) or _openai_fault(self.faults)
        if refusal is not None:
            return refusal
        charge = {"requests": 1, "tokens": _estimated_charge(call, self.default_max_tokens)}
        for name, bucket in self.buckets.items():
            if charge[name] > bucket.level():
                return self._throttled(call, name, charge[name])
        for name, bucket in self.buckets.items():
            bucket.take(charge[name])
        return Admission(charge, self._headers())

    def _headers(self) -> dict[str, str]:
        headers = {}
        for name, bucket in self.buckets.items():
            headers[f"x-ratelimit-limit-{name}"] = str(bucket.capacity)
            headers[f"x-ratelimit-remaining-{name}"] = str(math.floor(bucket.level()))
            headers[f"x-ratelimit-reset-{name}"] = go_duration(bucket.seconds_to_full())
        return headers

    def _throttled(self, call: Call, name: str, requested: int) -> Refusal:
        bucket = self.buckets[name]
        wait = bucket.seconds_until(requested)
        where = f"for {call.model} in organization {ORGANIZATION} on {_OPENAI_LIMIT_NAMES[name]}"
        if math.isinf(wait):
            message = (
                f"Request too large {where}: Limit {bucket.capacity}, Requested {requested}."
                " The input or output tokens must be reduced in order to run successfully."
            )
        else:
            used = bucket.capacity - math.floor(bucket.level())
            message = (
                f"Rate limit reached {where}: Limit {bucket.capacity}, Used {used}, Requested"
                f" {requested}. Please try again in {go_duration(wait)}."
            )
        message += f" Visit {_OPENAI_LIMITS_URL} to learn more."
        headers = self._headers()
        if self.retry_after and not math.isinf(wait):
            headers["Retry-After"] = str(max(1, math.ceil(wait)))
        body = openai_error(message, name, "rate_limit_exceeded")
        return Refusal(429, body, headers, "throttled")


AZURE_RPM_PER_1000_TPM = 6
"""Azure's ratio for chat models: a capacity unit is 1 000 TPM and 6 RPM (its quota page)."""
AZURE_RPM_WINDOWS = 6
"""RPM is evaluated over 10 s windows: a sixth of the minute, a sixth of the RPM each."""


@dataclass
class AzureProfile(_Served):
    """Azure OpenAI: per deployment, TPM counted per minute at admission (prompt plus
    ``max_tokens``), RPM in 10 s windows; 429 with ``retry-after-ms`` and ``retry-after``."""

    name: ClassVar[str] = "azure"
    tokens: int = 10_000
    requests: int | None = None
    """Requests per minute; None: ``AZURE_RPM_PER_1000_TPM`` per 1 000 ``tokens``."""
    minute_s: float = 60.0
    default_max_tokens: int = DEFAULT_MAX_TOKENS
    account: str = "ok"
    faults: Faults = field(default_factory=Faults)
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        _check_account(self.account, ACCOUNTS[:4], self.name)
        if self.requests is None:
            self.requests = max(1, self.tokens * AZURE_RPM_PER_1000_TPM // 1000)
        self._started = self.clock()
        self.deployments: dict[str, tuple[LimitWindow, LimitWindow]] = {}

    def elapsed(self) -> float:
        return self.clock() - self._started

    def limits(self) -> dict[str, int]:
        return {"requests": int(self.requests or 0), "tokens": self.tokens}

    def _windows(self, deployment: str) -> tuple[LimitWindow, LimitWindow]:
        """A deployment's token minute and request window, opened by its first call."""
        if deployment not in self.deployments:
            per_window = max(1, int(self.requests or 0) // AZURE_RPM_WINDOWS)
            tokens = ModelLimits(tokens=self.tokens, window_s=self.minute_s)
            requests = ModelLimits(requests=per_window, window_s=self.minute_s / AZURE_RPM_WINDOWS)
            self.deployments[deployment] = (
                LimitWindow(tokens, self.clock),
                LimitWindow(requests, self.clock),
            )
        return self.deployments[deployment]

    def admit(self, call: Call) -> Admission | Refusal:
        refusal = _openai_account(call, self.account) or _openai_fault(self.faults)
        if refusal is not None:
            return refusal
        tokens, requests = self._windows(call.deployment)
        charge = _estimated_charge(call, self.default_max_tokens)
        if not requests.fits(0):
            return self._throttled(tokens, requests, "call", requests.reset_s())
        if not tokens.fits(charge):
            return self._throttled(tokens, requests, "token", tokens.reset_s())
        tokens.take(charge)
        requests.take(0)
        return Admission({"requests": 1, "tokens": charge}, self._headers(tokens, requests))

    @staticmethod
    def _headers(tokens: LimitWindow, requests: LimitWindow) -> dict[str, str]:
        left_requests = int(requests.limits.requests or 0) - requests.requests
        left_tokens = int(tokens.limits.tokens or 0) - tokens.tokens
        return {
            "x-ratelimit-remaining-requests": str(max(0, left_requests)),
            "x-ratelimit-remaining-tokens": str(max(0, left_tokens)),
        }

    def _throttled(
        self, tokens: LimitWindow, requests: LimitWindow, what: str, wait: float
    ) -> Refusal:
        seconds = max(1, math.ceil(wait))
        message = (
            "Requests to the ChatCompletions_Create Operation under Azure OpenAI API have"
            f" exceeded {what} rate limit of your current OpenAI S0 pricing tier. Please retry"
            f" after {seconds} seconds. Please go here: https://aka.ms/oai/quotaincrease if you"
            " would like to further increase the default rate limit."
        )
        headers = self._headers(tokens, requests)
        headers["retry-after-ms"] = str(max(1, math.ceil(wait * 1000)))
        headers["retry-after"] = str(seconds)
        return Refusal(429, {"error": {"code": "429", "message": message}}, headers, "throttled")


_ANTHROPIC_LIMITS = ("requests", "input_tokens", "output_tokens")
_ANTHROPIC_LIMIT_NAMES = {
    "requests": "requests",
    "input_tokens": "input tokens",
    "output_tokens": "output tokens",
}


@dataclass
class AnthropicProfile(_Served):
    """Anthropic: request, input-token and output-token buckets; output charged
    ``max_tokens`` at admission, the unused part given back when the answer ends."""

    name: ClassVar[str] = "anthropic"
    requests: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    minute_s: float = 60.0
    round_remaining: bool = True
    """Token ``remaining`` headers rounded to the nearest thousand, as documented."""
    account: str = "ok"
    faults: Faults = field(default_factory=Faults)
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    given_back: int = 0
    """Output tokens given back at answers' ends (charged ``max_tokens``, used fewer)."""

    def __post_init__(self) -> None:
        _check_account(self.account, ACCOUNTS, self.name)
        self._started, self._wall_started = self.clock(), self.wall_clock()
        self._errors = 0
        self.buckets = {
            name: TokenBucket(limit, self.minute_s, self.clock)
            for name in _ANTHROPIC_LIMITS
            if (limit := getattr(self, name)) is not None
        }

    def elapsed(self) -> float:
        return self.clock() - self._started

    def limits(self) -> dict[str, int]:
        return {name: bucket.capacity for name, bucket in self.buckets.items()}

    def admit(self, call: Call) -> Admission | Refusal:
        refusal = self._account(call) or self._fault()
        if refusal is not None:
            return refusal
        if call.max_tokens is None and call.api == "messages":
            return self._error(400, "invalid_request_error", "max_tokens: Field required", {})
        charge = {
            "requests": 1,
            "input_tokens": call.prompt_tokens,
            "output_tokens": call.max_tokens or 0,
        }
        for name, bucket in self.buckets.items():
            if charge[name] > bucket.level():
                return self._throttled(name, charge[name])
        for name, bucket in self.buckets.items():
            bucket.take(charge[name])
        return Admission(charge, {})

    def finish(self, call: Call, admission: Admission) -> tuple[dict[str, str], dict[str, int]]:
        """The answer has ended: its unused output tokens go back to the bucket (a longer
        answer than charged takes the difference), then the headers are read."""
        charged = dict(admission.charged)
        unused = charged["output_tokens"] - call.completion_tokens
        if "output_tokens" in self.buckets:
            self.buckets["output_tokens"].adjust(unused)
        self.given_back += unused
        charged["output_tokens"] = call.completion_tokens
        return self._headers(), charged

    def _headers(self) -> dict[str, str]:
        headers = {}
        for name, bucket in self.buckets.items():
            headers.update(self._limit_headers(name.replace("_", "-"), bucket))
        tokens = [self.buckets[n] for n in ("input_tokens", "output_tokens") if n in self.buckets]
        if tokens:  # "tokens": the most restrictive token limit in effect now
            tightest = min(tokens, key=lambda bucket: bucket.level())
            headers.update(self._limit_headers("tokens", tightest))
        return headers

    def _limit_headers(self, label: str, bucket: TokenBucket) -> dict[str, str]:
        remaining = max(0, math.floor(bucket.level()))
        if self.round_remaining and label != "requests":
            remaining = round(remaining, -3)
        full_at = self._wall_started + self.elapsed() + bucket.seconds_to_full()
        reset = datetime.fromtimestamp(full_at, UTC).isoformat(timespec="milliseconds")
        return {
            f"anthropic-ratelimit-{label}-limit": str(bucket.capacity),
            f"anthropic-ratelimit-{label}-remaining": str(remaining),
            f"anthropic-ratelimit-{label}-reset": reset.replace("+00:00", "Z"),
        }

    def _throttled(self, name: str, requested: int) -> Refusal:
        bucket = self.buckets[name]
        wait = bucket.seconds_until(requested)
        message = (
            f"This request would exceed the rate limit for your organization ({ORGANIZATION})"
            f" of {bucket.capacity} {_ANTHROPIC_LIMIT_NAMES[name]} per minute. For details,"
            " refer to: https://docs.anthropic.com/en/api/rate-limits. You can see the response"
            " headers for current usage. Please reduce the prompt length or the maximum tokens"
            " requested, or try again later."
        )
        headers = self._headers()
        if not math.isinf(wait):
            headers["retry-after"] = str(max(1, math.ceil(wait)))
        return self._error(429, "rate_limit_error", message, headers, "throttled")

    def _account(self, call: Call) -> Refusal | None:
        answers = {
            "spent": (
                402,
                "billing_error",
                "Your credit balance is too low to access the Anthropic API. Please go to"
                " Plans & Billing to upgrade or purchase credits.",
            ),
            "invalid-key": (401, "authentication_error", "invalid x-api-key"),
            "no-permission": (
                403,
                "permission_error",
                "Your API key does not have permission to use the specified resource.",
            ),
            "unknown-model": (404, "not_found_error", f"model: {call.model}"),
        }
        if self.account not in answers:
            return None
        status, type_, message = answers[self.account]
        return self._error(status, type_, message, {}, "account")

    def _fault(self) -> Refusal | None:
        fault = self.faults.draw()
        if fault == "server_error":
            return self._error(500, "api_error", "Internal server error", {}, fault)
        if fault == "overloaded":
            return self._error(529, "overloaded_error", "Overloaded", {}, fault)
        return None

    def _error(
        self,
        status: int,
        type_: str,
        message: str,
        headers: Mapping[str, str],
        outcome: str = "invalid",
    ) -> Refusal:
        self._errors += 1
        body = {
            "type": "error",
            "error": {"type": type_, "message": message},
            "request_id": f"req_demo{self._errors:08d}",
        }
        return Refusal(status, body, headers, outcome)

    def stats(self) -> dict[str, Any]:
        return {"output_tokens_given_back": self.given_back}


@dataclass
class SelfHostedProfile:
    """An OpenAI-compatible server of its own (vLLM, llama.cpp, TGI): no limits and no rate
    headers; the batch and its queue decide when an answer comes (``batch_scheduler.py``)."""

    name: ClassVar[str] = "self-hosted"
    serving: BatchServing = field(default_factory=BatchServing)
    clock: Callable[[], float] = time.monotonic
    minute_s: float = 60.0

    def __post_init__(self) -> None:
        self.scheduler = BatchScheduler(self.serving)
        self._started = self.clock()

    def elapsed(self) -> float:
        return self.clock() - self._started

    def limits(self) -> dict[str, int]:
        return {}

    def admit(self, call: Call) -> Admission | Refusal:
        return Admission({"requests": 1}, {})

    async def serve(self, call: Call, latency_s: float) -> Refusal | None:
        """Queue for the batch and decode (the endpoint's ``latency_s`` does not apply)."""
        if await self.scheduler.serve(call.completion_tokens):
            return None
        error = {"code": 503, "message": "Service Unavailable: the queue is full",
                 "type": "unavailable_error"}  # fmt: skip
        return Refusal(503, {"error": error}, {}, "unavailable")

    def finish(self, call: Call, admission: Admission) -> tuple[dict[str, str], dict[str, int]]:
        return {}, dict(admission.charged)

    def stats(self) -> dict[str, Any]:
        return {"self_hosted": self.scheduler.stats()}


PROFILES = ("fixed-window", "openai", "azure", "anthropic", "self-hosted")
