"""A demo model endpoint: OpenAI-compatible chat completions and embeddings, and
Anthropic's messages API, with deterministic answers (``python -m demo.model_api``).

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
the answer's), reported in ``usage`` and charged against the limits (``model_limits.py``).
``stats`` counts calls, 429s, tokens and the calls per prompt (a prompt paid twice shows).
"""

from __future__ import annotations

import argparse
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

from demo.model_limits import LimitWindow, ModelLimits


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


@dataclass
class ModelApi:
    """The endpoint's state: its limits, knobs and counters."""

    limits: ModelLimits = field(default_factory=ModelLimits)
    malformed_every: int = 0
    latency_s: float = 0.0
    embedding_dim: int = 8
    stats: Counter[str] = field(default_factory=Counter)
    calls_by_prompt: Counter[str] = field(default_factory=Counter)
    """Admitted calls per prompt text (served at ``/calls``)."""
    malformed_prompts: set[str] = field(default_factory=set)
    timeline: list[tuple[float, int, bool]] = field(default_factory=list)
    """Per call: seconds since the first window opened, its tokens, whether admitted."""

    def __post_init__(self) -> None:
        self.window = LimitWindow(self.limits)

    def answer(
        self, api: str, body: Mapping[str, Any]
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        """(status, JSON answer, headers) for one call."""
        prompt = _prompt_text(api, body)
        seed = hashlib.sha256(prompt.encode()).digest()
        document, completion = self._document(api, body, prompt, seed)
        tokens = count_tokens(prompt)
        ok, headers = self.window.admit(tokens + completion)
        self.timeline.append((round(self.window.elapsed(), 4), tokens + completion, ok))
        self.stats["requests"] += 1
        if not ok:
            self.stats["throttled"] += 1
            error = {"error": {"type": "rate_limit_error", "message": "rate limit reached"}}
            return 429, error, headers
        self.calls_by_prompt[prompt] += 1
        if api != "embeddings" and self._malformed(body, prompt, seed):
            self.stats["malformed"] += 1
            self.malformed_prompts.add(seed.hex()[:16])
        self.stats["prompt_tokens"] += tokens
        self.stats["completion_tokens"] += completion
        names = ("input_tokens", "output_tokens") if api == "messages" else _OPENAI_USAGE
        document["usage"] = dict(zip(names, (tokens, completion), strict=True))
        return 200, document, headers

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


def _schema(body: Mapping[str, Any]) -> Any:
    format_ = body.get("response_format") or {}
    return (format_.get("json_schema") or {}).get("schema")


STATE: web.AppKey[ModelApi] = web.AppKey("model_api")


def _prompt_text(api: str, body: Mapping[str, Any]) -> str:
    if api == "embeddings":
        return str(body.get("input", ""))
    parts = [str(body.get("system") or "")]
    for message in body.get("messages") or []:
        if isinstance(message, Mapping):
            parts.append(str(message.get("content") or ""))
    return "\n".join(p for p in parts if p)


def build_app(api: ModelApi) -> web.Application:
    app = web.Application()
    app[STATE] = api
    for path, kind in (
        ("/v1/chat/completions", "chat"),
        ("/v1/embeddings", "embeddings"),
        ("/v1/messages", "messages"),
    ):
        app.router.add_post(path, _handler(kind))
    app.router.add_get("/stats", _stats)
    app.router.add_get("/timeline", _timeline)
    app.router.add_get("/calls", _calls)
    return app


def _handler(kind: str) -> Any:
    async def handle(request: web.Request) -> web.Response:
        api = request.app[STATE]
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": {"message": "body is not JSON"}}, status=400)
        if api.latency_s:
            await asyncio.sleep(api.latency_s)
        status, document, headers = api.answer(kind, body)
        return web.json_response(document, status=status, headers=headers)

    return handle


async def _stats(request: web.Request) -> web.Response:
    api = request.app[STATE]
    paid_twice = sum(1 for calls in api.calls_by_prompt.values() if calls > 1)
    return web.json_response(
        {
            **api.stats,
            "prompts": len(api.calls_by_prompt),
            "prompts_paid_twice": paid_twice,
            "malformed_prompts": len(api.malformed_prompts),
        }
    )


async def _calls(request: web.Request) -> web.Response:
    return web.json_response(request.app[STATE].calls_by_prompt)


async def _timeline(request: web.Request) -> web.Response:
    api = request.app[STATE]
    return web.json_response({"window_s": api.limits.window_s, "calls": api.timeline})


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
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8090, help="0: any free port (8090)")
    parser.add_argument("--requests", type=int, help="requests per window (default: no limit)")
    parser.add_argument("--tokens", type=int, help="tokens per window (default: no limit)")
    parser.add_argument("--window", type=float, default=60.0, help="window seconds (60)")
    parser.add_argument("--malformed-every", type=int, default=0, help="every Nth prompt (0)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per answer (0)")
    parser.add_argument("--nonsense-headers", action="store_true", help="-1 in every header")
    parser.add_argument(
        "--windows-from-first-call", action="store_true", help="the first call opens a window"
    )
    args = parser.parse_args(argv)
    limits = ModelLimits(
        args.requests, args.tokens, args.window, args.nonsense_headers, args.windows_from_first_call
    )
    api = ModelApi(limits, args.malformed_every, args.latency)
    asyncio.run(_serve(api, args.port))


async def _serve(api: ModelApi, port: int) -> None:
    async with run_model_api(api, port=port) as base_url:
        print(f"model endpoint listening on {base_url}", flush=True)  # read by tests
        await asyncio.Event().wait()


if __name__ == "__main__":
    main()
