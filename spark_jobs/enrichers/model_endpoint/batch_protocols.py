"""The two providers' batch APIs, as the batch mode (``batch_calls.py``) asks them.

* OpenAI (``/v1/files`` + ``/v1/batches``): the requests go up as a JSONL file of
  ``{custom_id, method, url, body}`` lines, the batch is created with ``metadata``
  naming its intent (``enrich_intent``), and its answers come back as an output file
  (answered requests) and an error file (errored ones, and ``batch_expired`` lines).
* Anthropic (``/v1/messages/batches``): the requests go in the create call itself as
  ``{custom_id, params}``; the answers come as JSONL at ``results_url`` once it ended.

A row's outcome (:class:`RowOutcome`) is the answer's HTTP status and body as the
online call would have had them (200 and the completion; 4xx/5xx and the error), or
none for a request the batch never ran (expired, cancelled): it is sent again. The calls
go over the enricher's session (its key, its headers), each answer capped; a refused or
broken one raises the enricher's errors, with the key redacted.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

from spark_jobs.records.batch_state import (
    METADATA_KEY,
    BatchState,
    anthropic_state,
    batches_url,
    openai_state,
)

from ..errors import (
    ClientStatusError,
    EnrichmentError,
    InvalidResponseError,
    ServerError,
    TransportError,
    snippet,
)
from .config import ModelConfig

MAX_ANSWER_BYTES = 512 * 2**20
"""The most one batch API answer (a results file) may be: above the 200 and 256 MB a
batch's input may be, as answers run longer than prompts."""


@dataclass(frozen=True)
class BatchLimits:
    """What one batch may hold, as each provider documents it."""

    requests: int
    bytes: int


OPENAI_LIMITS = BatchLimits(50_000, 200 * 2**20)
ANTHROPIC_LIMITS = BatchLimits(100_000, 256 * 2**20)


@dataclass(frozen=True)
class RowOutcome:
    """One request's answer out of a batch; ``status`` None: the batch never ran it."""

    status: int | None
    payload: bytes = b""


class BatchHttp:
    """JSON and file calls over the enricher's session, errors as the enricher's."""

    def __init__(self, session: aiohttp.ClientSession, redact: Callable[[str], str]) -> None:
        self._session = session
        self.redact = redact

    async def call(self, method: str, url: str, **options: Any) -> bytes:
        headers = {"Accept-Encoding": "identity", **options.pop("headers", {})}
        try:
            async with self._session.request(
                method, url, headers=headers, allow_redirects=False, **options
            ) as response:
                payload = await _read_capped(response.content)
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as error:
            raise TransportError(self.redact(f"{method} {url}: {error!r}")) from None
        if len(payload) > MAX_ANSWER_BYTES:
            raise InvalidResponseError(self.redact(f"{method} {url}: over {MAX_ANSWER_BYTES}"))
        if 200 <= status < 300:
            return payload
        message = self.redact(
            f"HTTP {status} from {method} {url}: {snippet(payload, self.redact)!r}"
        )
        if status >= 500 or status in (408, 425, 429):
            raise ServerError(message, status=status)
        raise ClientStatusError(message, status=status)

    async def json(self, method: str, url: str, **options: Any) -> Any:
        payload = await self.call(method, url, **options)
        try:
            return json.loads(payload)
        except (ValueError, RecursionError):
            text = snippet(payload, self.redact)
            raise InvalidResponseError(self.redact(f"not JSON from {url}: {text!r}")) from None


async def _read_capped(content: aiohttp.StreamReader) -> bytes:
    """The whole answer, or ``MAX_ANSWER_BYTES + 1`` of it: a larger one is refused."""
    chunks, size = [], 0
    async for chunk in content.iter_chunked(2**20):
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            break
    return b"".join(chunks)


class BatchProtocol(Protocol):
    limits: BatchLimits
    keeps_metadata: bool
    """Whether a batch names its intent (OpenAI); else it is found by its request count."""

    def line(self, custom_id: str, body: str) -> bytes:
        """One request as the batch holds it (its size counts toward the limit)."""
        ...

    async def create(self, http: BatchHttp, intent: str, lines: list[bytes]) -> str:
        """Send the requests and create their batch; its id."""
        ...

    async def state(self, http: BatchHttp, batch_id: str) -> BatchState: ...

    async def page(self, http: BatchHttp, after: str | None) -> tuple[list[BatchState], str | None]:
        """A page of batches, newest first, after the batch ``after``; the next cursor."""
        ...

    async def results(self, http: BatchHttp, state: BatchState) -> dict[str, RowOutcome]: ...


def protocol_for(config: ModelConfig, url: str) -> BatchProtocol:
    """The batch API of the endpoint ``url`` (the online one) answers for ``config.api``."""
    collection = batches_url(url, config.api)
    if config.api == "anthropic":
        return AnthropicBatches(collection, config.batch_size or ANTHROPIC_LIMITS.requests)
    path = "/chat/completions" if config.api == "chat" else "/embeddings"
    requests = config.batch_size or OPENAI_LIMITS.requests
    return OpenAIBatches(collection.removesuffix("/batches"), "/v1" + path, requests)


def _lines(payload: bytes, what: str) -> list[dict[str, Any]]:
    found = []
    for line in payload.splitlines():
        if line.strip():
            try:
                item = json.loads(line)
            except (ValueError, RecursionError):
                raise InvalidResponseError(f"a line of {what} is not JSON") from None
            if isinstance(item, dict) and isinstance(item.get("custom_id"), str):
                found.append(item)
    return found


async def _page(
    http: BatchHttp,
    url: str,
    cursor: str,
    after: str | None,
    state: Callable[[dict[str, Any]], BatchState],
) -> tuple[list[BatchState], str | None]:
    """A listing's page (both providers list newest first, ``has_more`` and ``last_id``)."""
    params = {"limit": "100", **({cursor: after} if after else {})}
    listing = await http.json("GET", url, params=params)
    states = [state(b) for b in listing.get("data") or []]
    return states, (listing.get("last_id") if listing.get("has_more") else None)


def _body(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


class OpenAIBatches:
    """OpenAI's Batch API at ``base`` (``.../v1``) for requests to ``endpoint``."""

    keeps_metadata = True

    def __init__(self, base: str, endpoint: str, requests: int) -> None:
        self.base, self.endpoint = base, endpoint
        self.limits = BatchLimits(min(requests, OPENAI_LIMITS.requests), OPENAI_LIMITS.bytes)

    def line(self, custom_id: str, body: str) -> bytes:
        head = json.dumps({"custom_id": custom_id, "method": "POST", "url": self.endpoint})
        return f'{head[:-1]}, "body": {body}}}'.encode()

    async def create(self, http: BatchHttp, intent: str, lines: list[bytes]) -> str:
        form = aiohttp.FormData()
        form.add_field("purpose", "batch")
        form.add_field("file", b"\n".join(lines), filename=f"{intent}.jsonl")
        writer = form()
        headers = {"Content-Type": writer.content_type}
        upload = await http.json("POST", f"{self.base}/files", data=writer, headers=headers)
        create = {
            "input_file_id": upload["id"],
            "endpoint": self.endpoint,
            "completion_window": "24h",
            "metadata": {METADATA_KEY: intent},
        }
        created = await http.json("POST", f"{self.base}/batches", data=_body(create))
        return str(created["id"])

    async def state(self, http: BatchHttp, batch_id: str) -> BatchState:
        return self._state(await http.json("GET", f"{self.base}/batches/{batch_id}"))

    def _state(self, batch: dict[str, Any]) -> BatchState:
        return openai_state(batch, f"{self.base}/files")

    async def page(self, http: BatchHttp, after: str | None) -> tuple[list[BatchState], str | None]:
        return await _page(http, f"{self.base}/batches", "after", after, self._state)

    async def results(self, http: BatchHttp, state: BatchState) -> dict[str, RowOutcome]:
        found: dict[str, RowOutcome] = {}
        for url in state.results:
            for line in _lines(await http.call("GET", url), url):
                response = line.get("response")
                if isinstance(response, dict) and isinstance(response.get("status_code"), int):
                    outcome = RowOutcome(response["status_code"], _body(response.get("body")))
                else:  # batch_expired, or no answer at all: sent again
                    outcome = RowOutcome(None)
                found[line["custom_id"]] = outcome
        return found


ANTHROPIC_ERRORS = {"invalid_request_error": 400, "not_found_error": 404, "rate_limit_error": 429}


class AnthropicBatches:
    """Anthropic's Message Batches at ``url`` (``.../v1/messages/batches``)."""

    keeps_metadata = False

    def __init__(self, url: str, requests: int) -> None:
        self.url = url
        self.limits = BatchLimits(min(requests, ANTHROPIC_LIMITS.requests), ANTHROPIC_LIMITS.bytes)

    def line(self, custom_id: str, body: str) -> bytes:
        return f'{{"custom_id": {json.dumps(custom_id)}, "params": {body}}}'.encode()

    async def create(self, http: BatchHttp, intent: str, lines: list[bytes]) -> str:
        body = b'{"requests": [' + b", ".join(lines) + b"]}"
        return str((await http.json("POST", self.url, data=body))["id"])

    async def state(self, http: BatchHttp, batch_id: str) -> BatchState:
        return self._state(await http.json("GET", f"{self.url}/{batch_id}"))

    _state = staticmethod(anthropic_state)

    async def page(self, http: BatchHttp, after: str | None) -> tuple[list[BatchState], str | None]:
        return await _page(http, self.url, "after_id", after, self._state)

    async def results(self, http: BatchHttp, state: BatchState) -> dict[str, RowOutcome]:
        found: dict[str, RowOutcome] = {}
        for url in state.results:
            for line in _lines(await http.call("GET", url), url):
                result = line.get("result") or {}
                kind = result.get("type")
                if kind == "succeeded":
                    found[line["custom_id"]] = RowOutcome(200, _body(result.get("message")))
                elif kind == "errored":
                    error = result.get("error") or {}
                    status = ANTHROPIC_ERRORS.get(str((error.get("error") or {}).get("type")), 500)
                    found[line["custom_id"]] = RowOutcome(status, _body(error))
                else:  # canceled, expired: sent again
                    found[line["custom_id"]] = RowOutcome(None)
        return found


__all__ = ["EnrichmentError"]
