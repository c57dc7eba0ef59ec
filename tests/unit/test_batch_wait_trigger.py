"""The trigger a deferred batch run waits on, against a real HTTP server on loopback that
answers as OpenAI's and Anthropic's batch objects do (``GET .../batches/{id}``), and a
real batch journal in a snapshot namespace. The whole path on a real scheduler and
triggerer: tests/integration/test_airflow_batch_deferral.py."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from aiohttp import web
from fsspec.core import url_to_fs

from enrichment_airflow.batch_wait_trigger import BatchWaitTrigger
from spark_jobs.records.batch_intent import BatchProgress
from spark_jobs.snapshots import NamespaceKey, SnapshotStore
from spark_jobs.snapshots.batch_journal import BatchJournal
from tests.integration.http_support import serve

KEY = NamespaceKey("classify_batch", "classify", "2024-01-02T00:00:00+00:00")
KEY_VALUE = "sk-trigger-secret"


def openai_batch(batch_id: str, status: str, done: int) -> dict:
    return {
        "id": batch_id,
        "object": "batch",
        "status": status,
        "request_counts": {"total": 10, "completed": done, "failed": 0},
    }


def anthropic_batch(batch_id: str, status: str, done: int) -> dict:
    counts = {"processing": 10 - done, "succeeded": done, "errored": 0}
    return {
        "id": batch_id,
        "type": "message_batch",
        "processing_status": status,
        "request_counts": {**counts, "canceled": 0, "expired": 0},
    }


def provider(answers: dict[str, Iterator[tuple[int, dict]]], seen: list[web.Request]):
    async def handler(request: web.Request) -> web.Response:
        seen.append(request)
        status, body = next(answers[request.path.rsplit("/", 1)[-1]])
        return web.json_response(body, status=status)

    return handler


def journal(root: str, partition: int, *batch_ids: str) -> None:
    fs, _ = url_to_fs(root)
    written = BatchJournal(fs, SnapshotStore(root).namespace_path(KEY), partition)
    for batch_id in batch_ids:
        intent = written.record_intent([f"c-{batch_id}"], None)
        written.record_batch(intent, batch_id)


def trigger(url: str, root: str, api: str = "chat") -> BatchWaitTrigger:
    path = "/v1/messages/batches" if api == "anthropic" else "/v1/batches"
    made = BatchWaitTrigger(
        api_conn_id="model_api",
        bearer_token="password",
        secret_headers={},
        headers={"anthropic-version": "2023-06-01"} if api == "anthropic" else {},
        batches_url=url + path,
        api=api,
        snapshot_root=root,
        namespace=[KEY.dag_id, KEY.task_id, KEY.interval_start],
        poll_interval_s=0.01,
    )
    classpath, kwargs = made.serialize()  # the triggerer rebuilds it from these
    assert classpath == "enrichment_airflow.batch_wait_trigger.BatchWaitTrigger"
    assert KEY_VALUE not in json.dumps(kwargs)
    return BatchWaitTrigger(**kwargs)


def connection(monkeypatch, url: str) -> None:
    host, port = url.removeprefix("http://").split(":")
    conn = {"conn_type": "http", "host": host, "port": int(port), "password": KEY_VALUE}
    monkeypatch.setenv("AIRFLOW_CONN_MODEL_API", json.dumps(conn))


async def first_event(made: BatchWaitTrigger) -> dict:
    async for event in made.run():
        return event.payload
    raise AssertionError("no event")


@pytest.mark.parametrize("api", ["chat", "anthropic"])
async def test_the_trigger_fires_once_every_journaled_batch_ended(tmp_path, monkeypatch, api):
    batch = openai_batch if api == "chat" else anthropic_batch
    ended = "completed" if api == "chat" else "ended"
    answers = {
        "b1": iter([(200, batch("b1", "in_progress", 3)), (200, batch("b1", ended, 10))]),
        "b2": iter([(503, {"error": "busy"}), (200, batch("b2", ended, 10))]),
    }
    seen: list[web.Request] = []
    journal(str(tmp_path), 0, "b1")
    journal(str(tmp_path), 1, "b2", "../../files/x")  # a hostile id: never asked
    async with serve(provider(answers, seen)) as url:
        connection(monkeypatch, url)
        event = await first_event(trigger(url, str(tmp_path), api))
    assert event == {"status": "success", "message": "2 provider batches ended"}
    assert sorted(r.path.rsplit("/", 1)[-1] for r in seen) == ["b1", "b1", "b2", "b2"]
    assert {r.headers["Authorization"] for r in seen} == {f"Bearer {KEY_VALUE}"}
    if api == "anthropic":
        assert {r.headers["anthropic-version"] for r in seen} == {"2023-06-01"}


async def test_a_batch_its_partition_saw_end_is_not_asked_again(tmp_path, monkeypatch):
    journal(str(tmp_path), 0, "b1")
    fs, _ = url_to_fs(str(tmp_path))
    written = BatchJournal(fs, SnapshotStore(str(tmp_path)).namespace_path(KEY), 0)
    [intent] = written.intents()
    written.record_progress(intent, BatchProgress("b1", "completed", 1, 1, 0, 1.0))
    seen: list[web.Request] = []
    async with serve(provider({}, seen)) as url:
        connection(monkeypatch, url)
        event = await first_event(trigger(url, str(tmp_path)))
    assert event["status"] == "success" and seen == []


async def test_a_batch_the_provider_refuses_to_show_fails_with_its_words(tmp_path, monkeypatch):
    refused = {"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}}
    journal(str(tmp_path), 0, "b1")
    async with serve(provider({"b1": iter([(401, refused)])}, [])) as url:
        connection(monkeypatch, url)
        event = await first_event(trigger(url, str(tmp_path)))
    assert event["status"] == "failed"
    assert "HTTP 401" in event["message"] and "invalid_api_key" in event["message"]
    assert KEY_VALUE not in event["message"]


async def test_the_key_goes_only_under_the_connections_base_url(tmp_path, monkeypatch):
    journal(str(tmp_path), 0, "b1")
    monkeypatch.setenv(
        "AIRFLOW_CONN_MODEL_API",
        json.dumps({"conn_type": "http", "host": "api.example.com", "password": KEY_VALUE}),
    )
    with pytest.raises(ValueError, match="is not under the base URL of connection 'model_api'"):
        await first_event(trigger("http://127.0.0.1:9", str(tmp_path)))
