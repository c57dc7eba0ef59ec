"""A demo model endpoint: OpenAI-compatible chat completions and embeddings, and
Anthropic's messages API, with deterministic answers (``python -m demo.model_api``), and
both providers' batch APIs (``batch_api.py``), whose requests are answered the same way.

Every answer follows from the prompt alone (its sha256), so a test or a benchmark knows
what each record gets, and a repeated prompt gets the same answer:

* chat with a ``response_format`` JSON schema: a value of that schema (an enum's choice,
  a number, a list of two...) picked by the hash; without one, a sentence naming it;
* every ``malformed_every``-th prompt (by hash) gets truncated JSON: the output a
  schema-less model sometimes writes;
* a prompt holding ``REFUSE`` is refused (``message.refusal``; Anthropic
  ``stop_reason: refusal``), one holding ``FILTER`` is withheld by the content filter;
* embeddings: ``embedding_dim`` numbers in [-1, 1) from the hash.

Tokens are counted as a quarter of the characters (prompt: the messages' text; completion:
the answer's) and reported in ``usage``. How a call is charged, limited and answered is the
endpoint's provider profile (``provider_profiles.py``: ``fixed-window`` by default, the
demo's original windows; ``openai``, ``azure``, ``anthropic``, ``self-hosted`` as those
providers document); one answer generator and one server serve them all. Each call is
admitted (charged) when it arrives, then served (the fixed ``latency_s``, or the self-hosted
server's batch), then settled when its answer ends (Anthropic's output adjustment).

``/stats`` counts calls, admissions, each refusal's outcome (``throttled``, ``server_error``,
``overloaded``, ``account``, ...), answers by status, tokens charged per limit
(``charged_<limit>``), usage, the calls per prompt (a prompt paid twice shows);
``/timeline`` has every call (arrival, status, charge per limit, latency) and each limit per
minute; ``/calls`` the answered calls per prompt.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from demo import model_api_options
from demo.batch_api import BatchApi, add_routes
from demo.batch_jobs import ANTHROPIC_LIMITS, BatchJobs, BatchKnobs
from demo.model_limits import ModelLimits
from demo.provider_profiles import Call, FixedWindowProfile, ProviderProfile, Refusal


def count_tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def schema_value(schema: Mapping[str, Any], seed: bytes) -> Any:
    """A value of ``schema`` chosen by ``seed`` (deterministic)."""
    kind = schema.get("type")
    kind = next((k for k in kind if k != "null"), None) if isinstance(kind, list) else kind
    pick = int.from_bytes(seed[:4], "big")
    if "enum" in schema:
        return schema["enum"][pick % len(schema["enum"])]
    if kind == "object":
        properties = schema.get("properties", {})
        return {
            name: schema_value(sub, hashlib.sha256(seed + name.encode()).digest())
            for name, sub in properties.items()
        }
    if kind == "array":
        items = schema.get("items", {})
        return [schema_value(items, hashlib.sha256(seed + bytes([i])).digest()) for i in range(2)]
    values = {
        "string": f"text-{seed.hex()[:6]}",
        "integer": pick % 100,
        "number": round((pick % 1000) / 1000, 3),
        "boolean": pick % 2 == 0,
    }
    return values.get(str(kind))


@dataclass(frozen=True)
class TimelineEntry:
    """One call as the endpoint saw it: when it arrived (seconds since the profile's limits
    started), its answer's status, whether the limits admitted it, what it was charged per
    limit (final: Anthropic's output after its adjustment) and how long its answer took."""

    at: float
    status: int
    admitted: bool
    charged: Mapping[str, int]
    latency_s: float

    @property
    def tokens(self) -> int:
        """Every token the call was charged, whichever limits count them."""
        return sum(n for name, n in self.charged.items() if name != "requests")

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "status": self.status,
            "admitted": self.admitted,
            "tokens": self.tokens,
            "charged": dict(self.charged),
            "latency_s": self.latency_s,
        }


@dataclass
class ModelApi:
    """The endpoint's state: its provider profile (``fixed-window`` over ``limits`` unless
    given), knobs and counters."""

    limits: ModelLimits = field(default_factory=ModelLimits)
    malformed_every: int = 0
    latency_s: float = 0.0
    embedding_dim: int = 8
    profile: ProviderProfile | None = None
    stats: Counter[str] = field(default_factory=Counter)
    by_status: Counter[int] = field(default_factory=Counter)
    calls_by_prompt: Counter[str] = field(default_factory=Counter)
    """Answered calls per prompt text (served at ``/calls``)."""
    malformed_prompts: set[str] = field(default_factory=set)
    timeline: list[TimelineEntry] = field(default_factory=list)
    batch_knobs: BatchKnobs = field(default_factory=BatchKnobs)
    """How the batch APIs' batches run (``batch_jobs.py``)."""
    batches: BatchApi = field(init=False)

    def __post_init__(self) -> None:
        if self.profile is None:
            self.profile = FixedWindowProfile(self.limits)
        self.batches = BatchApi(BatchJobs(self.batch_knobs, self.batch_answer))

    @property
    def provider(self) -> ProviderProfile:
        assert self.profile is not None  # set in __post_init__
        return self.profile

    async def answer(
        self, api: str, body: Mapping[str, Any], deployment: str | None = None
    ) -> tuple[int, dict[str, Any], Mapping[str, str]]:
        """(status, JSON answer, headers) for one call: admitted (charged) when it arrives,
        served, then settled when its answer ends."""
        prompt = _prompt_text(api, body)
        seed = hashlib.sha256(prompt.encode()).digest()
        document, completion = self._document(api, body, prompt, seed)
        tokens = count_tokens(prompt)
        model = str(body.get("model") or "")
        call = Call(api, model, deployment or model, tokens, completion, _max_tokens(body))
        profile, arrived = self.provider, self.provider.elapsed()
        self.stats["requests"] += 1
        decision = profile.admit(call)
        if isinstance(decision, Refusal):
            return self._refused(decision, arrived, admitted=False)
        refusal = await profile.serve(call, self.latency_s)
        if refusal is not None:
            return self._refused(refusal, arrived, admitted=True)
        headers, charged = profile.finish(call, decision)
        self._log(arrived, 200, True, charged)
        self.stats["admitted"] += 1
        return 200, self._answered(api, body, prompt, document, completion), headers

    def batch_answer(self, api: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """The answer one request of a batch gets (``batch_api.py``): the same document
        and usage as online, outside the online limits (a batch has its own)."""
        prompt = _prompt_text(api, body)
        _max_tokens(body)  # the same refusal of a bad max_tokens
        seed = hashlib.sha256(prompt.encode()).digest()
        document, completion = self._document(api, body, prompt, seed)
        self.stats["batch_requests"] += 1
        return self._answered(api, body, prompt, document, completion)

    def _answered(
        self,
        api: str,
        body: Mapping[str, Any],
        prompt: str,
        document: dict[str, Any],
        completion: int,
    ) -> dict[str, Any]:
        """``document`` with its usage, counted as answered (and paid)."""
        seed, tokens = hashlib.sha256(prompt.encode()).digest(), count_tokens(prompt)
        self.calls_by_prompt[prompt] += 1
        if api != "embeddings" and self._malformed(body, prompt, seed):
            self.stats["malformed"] += 1
            self.malformed_prompts.add(seed.hex()[:16])
        self.stats["prompt_tokens"] += tokens
        self.stats["completion_tokens"] += completion
        names = ("input_tokens", "output_tokens") if api == "messages" else _OPENAI_USAGE
        document["usage"] = dict(zip(names, (tokens, completion), strict=True))
        if api != "messages":  # OpenAI's usage always carries the sum too
            document["usage"]["total_tokens"] = tokens + completion
        return document

    def _refused(
        self, refusal: Refusal, arrived: float, admitted: bool
    ) -> tuple[int, dict[str, Any], Mapping[str, str]]:
        self.stats[refusal.outcome] += 1
        self._log(arrived, refusal.status, admitted, {})
        return refusal.status, dict(refusal.body), refusal.headers

    def _log(self, arrived: float, status: int, admitted: bool, charged: Mapping[str, int]) -> None:
        self.by_status[status] += 1
        for name, amount in charged.items():
            self.stats[f"charged_{name}"] += amount
        latency = round(self.provider.elapsed() - arrived, 4)
        self.timeline.append(TimelineEntry(round(arrived, 4), status, admitted, charged, latency))

    def _document(
        self, api: str, body: Mapping[str, Any], prompt: str, seed: bytes
    ) -> tuple[dict[str, Any], int]:
        if api == "embeddings":
            vector = [round(b / 128 - 1, 4) for b in (seed * 8)[: self.embedding_dim]]
            return {"object": "list", "data": [{"index": 0, "embedding": vector}]}, 0
        text, finish = self._text(body, prompt, seed)
        completion = count_tokens(text or "")
        if api == "messages":
            stop = "refusal" if "REFUSE" in prompt else "end_turn"
            content = [] if text is None else [{"type": "text", "text": text}]
            return {"type": "message", "content": content, "stop_reason": stop}, completion
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if "REFUSE" in prompt:
            message = {"role": "assistant", "content": None, "refusal": "I can't help with that."}
        choice = {"index": 0, "message": message, "finish_reason": finish}
        return {"object": "chat.completion", "choices": [choice]}, completion

    def _text(self, body: Mapping[str, Any], prompt: str, seed: bytes) -> tuple[str | None, str]:
        if "FILTER" in prompt:
            return None, "content_filter"
        if "REFUSE" in prompt:
            return None, "stop"
        schema = _schema(body)
        if schema is None:
            return f"The answer to prompt {seed.hex()[:8]} is {seed[0] % 10}.", "stop"
        text = json.dumps(schema_value(schema, seed))
        if self._malformed(body, prompt, seed):
            return text[: max(1, len(text) - 3)], "stop"
        return text, "stop"

    def _malformed(self, body: Mapping[str, Any], prompt: str, seed: bytes) -> bool:
        """Whether this prompt's structured answer is cut short (truncated JSON)."""
        every, answered = self.malformed_every, "REFUSE" not in prompt and "FILTER" not in prompt
        return bool(every) and answered and _schema(body) is not None and seed[4] % every == 0


_OPENAI_USAGE = ("prompt_tokens", "completion_tokens")


def _max_tokens(body: Mapping[str, Any]) -> int | None:
    """The most the answer may be (``max_completion_tokens``, else ``max_tokens``)."""
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"max_tokens must be an integer >= 1, got {value!r}")
    return value


def _schema(body: Mapping[str, Any]) -> Any:
    format_ = body.get("response_format") or {}
    return (format_.get("json_schema") or {}).get("schema")


STATE: web.AppKey[ModelApi] = web.AppKey("model_api")


def _prompt_text(api: str, body: Mapping[str, Any]) -> str:
    if api == "embeddings":
        return str(body.get("input", ""))
    parts = [_content_text(body.get("system"))]
    for message in body.get("messages") or []:
        if isinstance(message, Mapping):
            parts.append(_content_text(message.get("content")))
    return "\n".join(p for p in parts if p)


def _content_text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of content parts (both
    OpenAI and Anthropic accept ``[{"type": "text", "text": ...}]``), as providers count."""
    if isinstance(content, list):
        texts = (p.get("text") for p in content if isinstance(p, Mapping))
        return "\n".join(t for t in texts if isinstance(t, str))
    return str(content or "")


def build_app(api: ModelApi) -> web.Application:
    # a batch's upload or create call may be as large as its provider allows (256 MB)
    app = web.Application(client_max_size=ANTHROPIC_LIMITS.bytes + 2**20)
    app[STATE] = api
    for path, kind in (
        ("/v1/chat/completions", "chat"),
        ("/v1/embeddings", "embeddings"),
        ("/v1/messages", "messages"),
        # Azure OpenAI's deployment paths (``?api-version=...``); the limits are the deployment's
        ("/openai/deployments/{deployment}/chat/completions", "chat"),
        ("/openai/deployments/{deployment}/embeddings", "embeddings"),
    ):
        app.router.add_post(path, _handler(kind))
    add_routes(app, api.batches)
    app.router.add_get("/stats", _stats)
    app.router.add_get("/timeline", _timeline)
    app.router.add_get("/calls", _calls)
    return app


def _handler(kind: str) -> Any:
    async def handle(request: web.Request) -> web.Response:
        api = request.app[STATE]
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError(f"the body is a JSON {type(body).__name__}, not an object")
            answer = await api.answer(kind, body, request.match_info.get("deployment"))
        except ValueError as error:  # not JSON, or a field no provider would take
            message = f"bad request: {error}"
            return web.json_response({"error": {"message": message}}, status=400)
        status, document, headers = answer
        return web.json_response(document, status=status, headers=headers)

    return handle


async def _stats(request: web.Request) -> web.Response:
    api = request.app[STATE]
    paid_twice = sum(1 for calls in api.calls_by_prompt.values() if calls > 1)
    return web.json_response(
        {
            **api.stats,
            "profile": api.provider.name,
            "by_status": {str(status): n for status, n in sorted(api.by_status.items())},
            "prompts": len(api.calls_by_prompt),
            "prompts_paid_twice": paid_twice,
            "malformed_prompts": len(api.malformed_prompts),
            **api.provider.stats(),
            **api.batches.jobs.stats(),
            "batch_steps_reached": sorted(s for s, e in api.batches.reached.items() if e.is_set()),
        }
    )


async def _calls(request: web.Request) -> web.Response:
    return web.json_response(request.app[STATE].calls_by_prompt)


async def _timeline(request: web.Request) -> web.Response:
    """Every call, and each limit per minute: what a benchmark needs to compute the share of
    each limit used per minute."""
    api = request.app[STATE]
    profile = api.provider
    return web.json_response(
        {
            "profile": profile.name,
            "window_s": profile.minute_s,
            "minute_s": profile.minute_s,
            "limits": profile.limits(),
            "calls": [entry.to_json() for entry in sorted(api.timeline, key=_arrival)],
        }
    )


def _arrival(entry: TimelineEntry) -> float:
    return entry.at  # entries are logged as answers end; a benchmark reads them by arrival


@asynccontextmanager
async def run_model_api(
    api: ModelApi, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[str]:
    """Serve ``api`` in the running event loop; yields its base URL (``.../v1``)."""
    runner = web.AppRunner(build_app(api), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        yield f"http://{host}:{runner.addresses[0][1]}/v1"
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    options = model_api_options.parse(argv)
    api = ModelApi(
        malformed_every=options.malformed_every,
        latency_s=options.latency_s,
        profile=options.profile,
        batch_knobs=options.batch_knobs,
    )
    asyncio.run(_serve(api, options.port))


async def _serve(api: ModelApi, port: int) -> None:
    async with run_model_api(api, port=port) as base_url:
        print(f"model endpoint listening on {base_url}", flush=True)  # read by tests
        await asyncio.Event().wait()


if __name__ == "__main__":
    main()
