"""Provider batch APIs on the demo model endpoint, written from the providers' docs.

OpenAI's Batch API: ``POST /v1/files`` (multipart, ``purpose=batch``, a JSONL file of
``{custom_id, method, url, body}`` lines, up to 50 000 requests and 200 MB), ``POST
/v1/batches`` (``input_file_id``, ``endpoint``, ``completion_window: 24h``, ``metadata`` of
up to 16 pairs), ``GET /v1/batches/{id}``, ``GET /v1/batches?limit&after`` (newest first),
``POST /v1/batches/{id}/cancel``; statuses ``validating``, ``failed``, ``in_progress``,
``finalizing``, ``completed``, ``expired``, ``cancelling``, ``cancelled``; ``request_counts``
``{total, completed, failed}``; the ``output_file_id`` (answered requests) and
``error_file_id`` (errored ones, and ``batch_expired`` for those an expiry left) read at
``GET /v1/files/{id}/content``.

Anthropic's Message Batches: ``POST /v1/messages/batches`` (``requests: [{custom_id,
params}]``, up to 100 000 requests or 256 MB, ``custom_id`` of 1 to 64 of
``[a-zA-Z0-9_-]``, unique), ``GET /v1/messages/batches/{id}`` (``processing_status``
``in_progress``, ``canceling``, ``ended``; ``request_counts`` ``{processing, succeeded,
errored, canceled, expired}``; ``results_url`` once ended), ``GET .../{id}/results`` (JSONL,
``result.type`` ``succeeded``, ``errored``, ``canceled``, ``expired``), ``GET
/v1/messages/batches?limit&after_id`` (newest first), ``POST .../{id}/cancel``.

The batches themselves run in ``batch_jobs.py``. ``stall_at`` holds a step's answer
forever once the step is done (``upload``: before the file is kept; ``create``: after the
batch is; ``results``: before its results are sent) and sets ``reached[step]``: a test
kills its client there (``POST /stall?step=...`` for an endpoint in its own process).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from demo.batch_jobs import (
    ANTHROPIC_LIMITS,
    OPENAI_LIMITS,
    Batch,
    BatchJobs,
    BatchLimits,
    Result,
)
from demo.provider_profiles import openai_error

ENDPOINTS = {"/v1/chat/completions": "chat", "/v1/embeddings": "embeddings"}
CUSTOM_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")
METADATA_PAIRS, METADATA_KEY, METADATA_VALUE = 16, 64, 512


@dataclass
class BatchApi:
    """The batch side of one endpoint: its batches, uploaded files and stalls."""

    jobs: BatchJobs
    files: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    """File id -> (purpose, content): uploads, and the output and error files."""
    stall_at: set[str] = field(default_factory=set)
    reached: dict[str, asyncio.Event] = field(default_factory=dict)
    inputs: dict[str, tuple[str, str]] = field(default_factory=dict)
    """OpenAI batch id -> (input file id, endpoint), which its batch object shows."""

    def limits(self, provider: BatchLimits) -> BatchLimits:
        wanted = self.jobs.knobs.max_requests
        return BatchLimits(min(provider.requests, wanted or provider.requests), provider.bytes)

    async def step(self, name: str) -> None:
        """Hold the answer forever when a test stalls ``name`` (``reached[name]`` set)."""
        if name in self.stall_at:
            self.reached.setdefault(name, asyncio.Event()).set()
            await asyncio.Event().wait()


BATCHES: web.AppKey[BatchApi] = web.AppKey("batch_api")


def add_routes(app: web.Application, api: BatchApi) -> None:
    app[BATCHES] = api
    app.router.add_post("/v1/files", _upload)
    app.router.add_get("/v1/files/{id}/content", _file_content)
    app.router.add_post("/v1/batches", _openai_create)
    app.router.add_get("/v1/batches", _openai_list)
    app.router.add_get("/v1/batches/{id}", _openai_get)
    app.router.add_post("/v1/batches/{id}/cancel", _openai_cancel)
    app.router.add_post("/v1/messages/batches", _anthropic_create)
    app.router.add_get("/v1/messages/batches", _anthropic_list)
    app.router.add_get("/v1/messages/batches/{id}", _anthropic_get)
    app.router.add_get("/v1/messages/batches/{id}/results", _anthropic_results)
    app.router.add_post("/v1/messages/batches/{id}/cancel", _anthropic_cancel)
    app.router.add_post("/stall", _stall)


async def _stall(request: web.Request) -> web.Response:
    """``POST /stall?step=create`` stalls a step from now on, ``POST /stall`` none: the
    tests' kill points for an endpoint in its own process (``reached`` in ``/stats``)."""
    api = request.app[BATCHES]
    step = request.query.get("step")
    api.stall_at = {step} if step else set()
    if step:
        api.reached.pop(step, None)
    return web.json_response({"stall_at": sorted(api.stall_at)})


# -- OpenAI ------------------------------------------------------------------------------


def _openai_bad(message: str, status: int = 400) -> web.Response:
    body = openai_error(message, "invalid_request_error", None)
    return web.json_response(body, status=status)


async def _upload(request: web.Request) -> web.Response:
    api = request.app[BATCHES]
    form = await request.post()
    purpose, upload = form.get("purpose"), form.get("file")
    if purpose != "batch" or not isinstance(upload, web.FileField):
        return _openai_bad("a batch file needs purpose=batch and a file part")
    content = upload.file.read()
    if len(content) > api.limits(OPENAI_LIMITS).bytes:
        return _openai_bad(f"the file is over {OPENAI_LIMITS.bytes} bytes")
    await api.step("upload")
    file_id = f"file-{len(api.files) + 1:06d}"
    api.files[file_id] = ("batch", content)
    created = int(api.jobs.clock.provider_time(api.jobs.clock.now()))
    return web.json_response(
        {
            "id": file_id,
            "object": "file",
            "bytes": len(content),
            "created_at": created,
            "filename": upload.filename,
            "purpose": "batch",
        }
    )


async def _file_content(request: web.Request) -> web.Response:
    api = request.app[BATCHES]
    found = api.files.get(request.match_info["id"])
    if found is None:
        return _openai_bad("no such file", 404)
    if found[0] == "batch_output":
        await api.step("results")
    return web.Response(body=found[1], content_type="application/jsonl")


async def _openai_create(request: web.Request) -> web.Response:
    api = request.app[BATCHES]
    body = await request.json()
    endpoint, file_id = body.get("endpoint"), body.get("input_file_id")
    metadata = body.get("metadata") or {}
    if body.get("completion_window") != "24h":
        return _openai_bad("completion_window: only 24h is supported")
    if endpoint not in ENDPOINTS:
        return _openai_bad(f"endpoint: {endpoint!r} is not supported")
    problem = _metadata_problem(metadata)
    if problem:
        return _openai_bad(problem)
    found = api.files.get(str(file_id))
    if found is None or found[0] != "batch":
        return _openai_bad(f"no batch file {file_id!r}", 404)
    requests, errors = _openai_lines(found[1], endpoint, api.limits(OPENAI_LIMITS))
    batch = api.jobs.create("batch_", ENDPOINTS[endpoint], requests, metadata, errors)
    api.inputs[batch.id] = str(file_id), endpoint
    await api.step("create")
    return web.json_response(_openai_batch(api, batch))


def _metadata_problem(metadata: Any) -> str | None:
    if not isinstance(metadata, dict) or len(metadata) > METADATA_PAIRS:
        return f"metadata: an object of at most {METADATA_PAIRS} pairs"
    for key, value in metadata.items():
        if len(key) > METADATA_KEY or not isinstance(value, str) or len(value) > METADATA_VALUE:
            return f"metadata: keys of at most {METADATA_KEY} and values of {METADATA_VALUE}"
    return None


def _openai_lines(
    content: bytes, endpoint: str, limits: BatchLimits
) -> tuple[list[tuple[str, dict[str, Any]]], list[dict[str, Any]]]:
    """The requests of an input file, or the errors that fail its batch."""
    requests: list[tuple[str, dict[str, Any]]] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()
    for number, line in enumerate(content.splitlines(), 1):
        try:
            item = json.loads(line)
            custom_id, body = item["custom_id"], item["body"]
            ok = item.get("method") == "POST" and item.get("url") == endpoint
        except (ValueError, KeyError, TypeError):
            errors.append(_line_error(number, "invalid_json_line", "not a request line"))
            continue
        if not ok or not isinstance(body, dict) or not isinstance(custom_id, str):
            errors.append(_line_error(number, "invalid_request", f"not a POST {endpoint}"))
        elif custom_id in seen:
            errors.append(_line_error(number, "duplicate_custom_id", custom_id))
        seen.add(str(custom_id))
        requests.append((str(custom_id), body))
    if len(requests) > limits.requests:
        errors.append(_line_error(None, "too_many_requests", f"over {limits.requests}"))
    return requests, errors


def _line_error(line: int | None, code: str, message: str) -> dict[str, Any]:
    return {"code": code, "message": message, "param": None, "line": line}


def _openai_batch(api: BatchApi, batch: Batch) -> dict[str, Any]:
    jobs, clock = api.jobs, api.jobs.clock
    status = jobs.status(batch)
    counts = batch.counts()
    document: dict[str, Any] = {
        "id": batch.id,
        "object": "batch",
        "endpoint": api.inputs[batch.id][1],
        "input_file_id": api.inputs[batch.id][0],
        "completion_window": "24h",
        "status": status,
        "created_at": int(clock.provider_time(batch.created)),
        "expires_at": int(clock.provider_time(batch.created + jobs.knobs.day_s)),
        "metadata": dict(batch.metadata),
        "request_counts": {
            "total": len(batch.requests),
            "completed": counts["succeeded"],
            "failed": counts["errored"] + counts["expired"],
        },
        "output_file_id": None,
        "error_file_id": None,
        "errors": {"object": "list", "data": batch.failed} if batch.failed else None,
    }
    if status in ("completed", "expired", "cancelled"):
        document.update(_openai_files(api, batch))
    return document


def _openai_files(api: BatchApi, batch: Batch) -> dict[str, str | None]:
    """The batch's output and error files (made once, when first asked for)."""
    ids = {"output_file_id": f"file-{batch.id}-out", "error_file_id": f"file-{batch.id}-err"}
    if ids["output_file_id"] not in api.files:
        answered: list[dict[str, Any]] = []
        errored: list[dict[str, Any]] = []
        for index, (custom_id, result) in enumerate(batch.results.items()):
            line = _openai_result(f"batch_req_{index:06d}", custom_id, result)
            if line is not None:
                (answered if result.outcome == "succeeded" else errored).append(line)
        api.files[ids["output_file_id"]] = ("batch_output", _jsonl(answered))
        api.files[ids["error_file_id"]] = ("batch_output", _jsonl(errored))
    found: dict[str, str | None] = {}
    for name, file_id in ids.items():
        found[name] = file_id if api.files[file_id][1] else None
    return found


def _openai_result(line_id: str, custom_id: str, result: Result) -> dict[str, Any] | None:
    """An output or error file's line; none for a request a cancellation left."""
    line: dict[str, Any] = {"id": line_id, "custom_id": custom_id, "response": None}
    if result.outcome == "succeeded":
        response = {"status_code": 200, "request_id": line_id, "body": result.document}
        return {**line, "response": response, "error": None}
    if result.outcome == "errored":
        message = str((result.document or {}).get("message"))
        error = openai_error(message, "invalid_request_error", None)
        response = {"status_code": 400, "request_id": line_id, "body": error}
        return {**line, "response": response, "error": None}
    if result.outcome == "expired":
        error = {"code": "batch_expired", "message": "This request could not be executed"}
        return {**line, "error": error}
    return None


def _jsonl(lines: Iterable[Mapping[str, Any]]) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def _batch_of(request: web.Request, prefix: str) -> Batch | None:
    batch = request.app[BATCHES].jobs.batches.get(request.match_info["id"])
    return batch if batch is not None and batch.id.startswith(prefix) else None


async def _openai_get(request: web.Request) -> web.Response:
    return _openai_answer(request, cancel=False)


async def _openai_cancel(request: web.Request) -> web.Response:
    return _openai_answer(request, cancel=True)


def _openai_answer(request: web.Request, cancel: bool) -> web.Response:
    api, batch = request.app[BATCHES], _batch_of(request, "batch_")
    if batch is None:
        return _openai_bad("no such batch", 404)
    if cancel:
        api.jobs.cancel(batch)
    return web.json_response(_openai_batch(api, batch))


async def _openai_list(request: web.Request) -> web.Response:
    api = request.app[BATCHES]
    page, more = _page(api, "batch_", request.query.get("after"), request.query.get("limit"))
    data = [_openai_batch(api, batch) for batch in page]
    first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
    listing = {"object": "list", "data": data, "first_id": first, "last_id": last}
    return web.json_response({**listing, "has_more": more})


def _page(
    api: BatchApi, prefix: str, after: str | None, limit: str | None
) -> tuple[list[Batch], bool]:
    """A page of batches, newest first, after the one with id ``after``."""
    newest_first = [b for b in reversed(api.jobs.batches.values()) if b.id.startswith(prefix)]
    if after is not None:
        ids = [b.id for b in newest_first]
        newest_first = newest_first[ids.index(after) + 1 :] if after in ids else []
    size = max(1, min(100, int(limit or 20)))
    return newest_first[:size], len(newest_first) > size


# -- Anthropic ---------------------------------------------------------------------------


def _anthropic_bad(message: str, status: int = 400) -> web.Response:
    error_type = "not_found_error" if status == 404 else "invalid_request_error"
    body = {"type": "error", "error": {"type": error_type, "message": message}}
    return web.json_response(body, status=status)


async def _anthropic_create(request: web.Request) -> web.Response:
    api = request.app[BATCHES]
    raw = await request.read()
    limits = api.limits(ANTHROPIC_LIMITS)
    if len(raw) > limits.bytes:
        return _anthropic_bad(f"a batch is at most {limits.bytes} bytes", 413)
    requests = json.loads(raw).get("requests")
    if not isinstance(requests, list) or not 1 <= len(requests) <= limits.requests:
        return _anthropic_bad(f"requests: 1 to {limits.requests} of them")
    found: list[tuple[str, dict[str, Any]]] = []
    for item in requests:
        custom_id, params = item.get("custom_id"), item.get("params")
        if not isinstance(custom_id, str) or not CUSTOM_ID.fullmatch(custom_id):
            return _anthropic_bad(f"custom_id {custom_id!r}: 1 to 64 of [a-zA-Z0-9_-]")
        if not isinstance(params, dict):
            return _anthropic_bad(f"params of {custom_id}: an object")
        found.append((custom_id, params))
    if len({custom_id for custom_id, _ in found}) < len(found):
        return _anthropic_bad("custom_id: each must be unique within the batch")
    batch = api.jobs.create("msgbatch_", "messages", found)
    await api.step("create")
    return web.json_response(_anthropic_batch(request, batch))


def _anthropic_batch(request: web.Request, batch: Batch) -> dict[str, Any]:
    jobs = request.app[BATCHES].jobs
    status = jobs.status(batch)
    counts = batch.counts()
    ended = status in ("completed", "expired", "cancelled", "finalizing")
    processing = "canceling" if status == "cancelling" else "ended" if ended else "in_progress"
    results_url = f"{request.url.origin()}/v1/messages/batches/{batch.id}/results"
    return {
        "id": batch.id,
        "type": "message_batch",
        "processing_status": processing,
        "request_counts": {
            "processing": len(batch.requests) - batch.done,
            "succeeded": counts["succeeded"],
            "errored": counts["errored"],
            "canceled": counts["canceled"],
            "expired": counts["expired"],
        },
        "created_at": _rfc3339(jobs.clock.provider_time(batch.created)),
        "expires_at": _rfc3339(jobs.clock.provider_time(batch.created + jobs.knobs.day_s)),
        "ended_at": _rfc3339(jobs.clock.provider_time(batch.ended)) if batch.ended else None,
        "cancel_initiated_at": (
            _rfc3339(jobs.clock.provider_time(batch.cancelled)) if batch.cancelled else None
        ),
        "archived_at": None,
        "results_url": results_url if ended else None,
    }


def _rfc3339(at: float | None) -> str | None:
    return None if at is None else datetime.fromtimestamp(at, UTC).isoformat()


async def _anthropic_get(request: web.Request) -> web.Response:
    return _anthropic_answer(request, cancel=False)


async def _anthropic_cancel(request: web.Request) -> web.Response:
    return _anthropic_answer(request, cancel=True)


def _anthropic_answer(request: web.Request, cancel: bool) -> web.Response:
    batch = _batch_of(request, "msgbatch_")
    if batch is None:
        return _anthropic_bad("no such batch", 404)
    if cancel:
        request.app[BATCHES].jobs.cancel(batch)
    return web.json_response(_anthropic_batch(request, batch))


async def _anthropic_list(request: web.Request) -> web.Response:
    api = request.app[BATCHES]
    page, more = _page(api, "msgbatch_", request.query.get("after_id"), request.query.get("limit"))
    data = [_anthropic_batch(request, batch) for batch in page]
    first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
    return web.json_response({"data": data, "has_more": more, "first_id": first, "last_id": last})


async def _anthropic_results(request: web.Request) -> web.Response:
    api, batch = request.app[BATCHES], _batch_of(request, "msgbatch_")
    if batch is None:
        return _anthropic_bad("no such batch", 404)
    if _anthropic_batch(request, batch)["processing_status"] != "ended":
        return _anthropic_bad("the batch is still processing: no results yet")
    await api.step("results")
    lines = [_anthropic_result(custom_id, result) for custom_id, result in batch.results.items()]
    return web.Response(body=_jsonl(lines), content_type="application/binary")


def _anthropic_result(custom_id: str, result: Result) -> dict[str, Any]:
    found: dict[str, Any] = {"type": result.outcome}
    if result.outcome == "succeeded":
        found["message"] = result.document
    elif result.outcome == "errored":
        message = str((result.document or {}).get("message"))
        found["error"] = {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": message},
        }
    return {"custom_id": custom_id, "result": found}
