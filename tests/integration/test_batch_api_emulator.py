"""The demo endpoint's batch APIs (OpenAI's Batch API, Anthropic's Message Batches) over
real HTTP on loopback: the protocol as documented, the compressed clock, seeded partial
failures, expiry, cancellation and what each custom_id was charged."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from demo.batch_jobs import BatchKnobs
from demo.model_api import ModelApi, run_model_api

CHAT = "/v1/chat/completions"


def _chat(prompt: str) -> dict[str, Any]:
    return {"model": "demo", "messages": [{"role": "user", "content": prompt}]}


async def _openai_batch(
    session: aiohttp.ClientSession, base: str, n: int, metadata: dict[str, str] | None = None
) -> dict[str, Any]:
    lines = [
        {"custom_id": f"r{i}", "method": "POST", "url": CHAT, "body": _chat(f"p{i}")}
        for i in range(n)
    ]
    form = aiohttp.FormData()
    form.add_field("purpose", "batch")
    form.add_field("file", "\n".join(map(json.dumps, lines)), filename="in.jsonl")
    async with session.post(f"{base}/files", data=form) as response:
        assert response.status == 200
        file_id = (await response.json())["id"]
    create = {"input_file_id": file_id, "endpoint": CHAT, "completion_window": "24h"}
    async with session.post(f"{base}/batches", json={**create, "metadata": metadata}) as response:
        assert response.status == 200, await response.text()
        return dict(await response.json())


async def _until(session: aiohttp.ClientSession, url: str, key: str, ends: set[str]) -> Any:
    for _ in range(400):
        async with session.get(url) as response:
            batch = await response.json()
        if batch[key] in ends:
            return batch
        await asyncio.sleep(0.02)
    raise AssertionError(f"{url} never reached {ends}: {batch}")


async def _lines(session: aiohttp.ClientSession, url: str) -> list[dict[str, Any]]:
    async with session.get(url) as response:
        return [json.loads(line) for line in (await response.read()).splitlines()]


async def test_openai_batch_runs_through_its_statuses_to_output_and_error_files():
    api = ModelApi(batch_knobs=BatchKnobs(process_s=0.3, fail_every=4))
    async with run_model_api(api) as base, aiohttp.ClientSession() as session:
        created = await _openai_batch(session, base, 40, {"intent": "abc"})
        assert created["status"] == "validating" and created["metadata"] == {"intent": "abc"}
        url = f"{base}/batches/{created['id']}"
        running = await _until(session, url, "status", {"in_progress"})
        assert running["request_counts"]["total"] == 40
        done = await _until(session, url, "status", {"completed"})
        answered = await _lines(session, f"{base}/files/{done['output_file_id']}/content")
        errored = await _lines(session, f"{base}/files/{done['error_file_id']}/content")
    assert len(answered) + len(errored) == 40 and errored, "seeded failures"
    assert done["request_counts"] == {
        "total": 40,
        "completed": len(answered),
        "failed": len(errored),
    }
    assert all(line["response"]["status_code"] == 200 for line in answered)
    assert answered[0]["response"]["body"]["usage"]["prompt_tokens"] > 0
    assert all(line["response"]["status_code"] == 400 for line in errored)
    stats = api.batches.jobs.stats()
    assert stats["batch_requests_charged"] == len(answered)  # errored ones are not charged
    assert stats["custom_ids_paid_twice"] == 0


async def test_openai_batch_expires_with_the_answers_it_has_and_lists_newest_first():
    api = ModelApi(batch_knobs=BatchKnobs(day_s=0.3, process_s=0.6))
    async with run_model_api(api) as base, aiohttp.ClientSession() as session:
        first = await _openai_batch(session, base, 20)
        second = await _openai_batch(session, base, 20, {"intent": "two"})
        expired = await _until(session, f"{base}/batches/{first['id']}", "status", {"expired"})
        answered = await _lines(session, f"{base}/files/{expired['output_file_id']}/content")
        left = await _lines(session, f"{base}/files/{expired['error_file_id']}/content")
        async with session.get(f"{base}/batches", params={"limit": "1"}) as response:
            page = await response.json()
        async with session.get(f"{base}/batches", params={"after": page["last_id"]}) as response:
            rest = await response.json()
    assert 0 < len(answered) < 20 and len(answered) + len(left) == 20
    assert {line["error"]["code"] for line in left} == {"batch_expired"}
    assert [b["id"] for b in page["data"]] == [second["id"]] and page["has_more"]
    assert [b["id"] for b in rest["data"]] == [first["id"]] and not rest["has_more"]


async def test_openai_refuses_what_its_docs_refuse():
    api = ModelApi(batch_knobs=BatchKnobs(max_requests=5))
    async with run_model_api(api) as base, aiohttp.ClientSession() as session:
        too_many = await _openai_batch(session, base, 6)
        create = {"input_file_id": "file-000001", "endpoint": CHAT, "completion_window": "1h"}
        async with session.post(f"{base}/batches", json=create) as response:
            window = response.status
        metadata = {f"k{i}": "v" for i in range(17)}
        async with session.post(
            f"{base}/batches", json={**create, "completion_window": "24h", "metadata": metadata}
        ) as response:
            pairs = response.status
    assert too_many["status"] == "failed"
    assert too_many["errors"]["data"][0]["code"] == "too_many_requests"
    assert (window, pairs) == (400, 400)


async def test_anthropic_batch_cancelled_keeps_what_was_done():
    api = ModelApi(batch_knobs=BatchKnobs(process_s=1.0))
    requests = [
        {"custom_id": f"r{i}", "params": {"model": "demo", "max_tokens": 9, **_chat(f"p{i}")}}
        for i in range(50)
    ]
    async with run_model_api(api) as base, aiohttp.ClientSession() as session:
        async with session.post(f"{base}/messages/batches", json={"requests": requests}) as r:
            batch = await r.json()
        assert batch["processing_status"] == "in_progress" and batch["results_url"] is None
        url = f"{base}/messages/batches/{batch['id']}"
        async with session.get(f"{url}/results") as response:
            assert response.status == 400  # no results before the end
        await asyncio.sleep(0.4)
        async with session.post(f"{url}/cancel") as response:
            assert (await response.json())["processing_status"] == "canceling"
        ended = await _until(session, url, "processing_status", {"ended"})
        results = await _lines(session, ended["results_url"])
        async with session.post(
            f"{base}/messages/batches", json={"requests": [{"custom_id": "a b", "params": {}}]}
        ) as response:
            bad_id = response.status
    kinds = {line["result"]["type"] for line in results}
    counts = ended["request_counts"]
    assert kinds == {"succeeded", "canceled"} and counts["processing"] == 0
    assert counts["succeeded"] + counts["canceled"] == 50 and 0 < counts["succeeded"] < 50
    succeeded = [line for line in results if line["result"]["type"] == "succeeded"]
    assert succeeded[0]["result"]["message"]["usage"]["input_tokens"] > 0
    assert api.batches.jobs.stats()["batch_requests_charged"] == counts["succeeded"]
    assert bad_id == 400
