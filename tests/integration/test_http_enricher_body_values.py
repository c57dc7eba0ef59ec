"""What a record's values put into a request body, seen by a real API on loopback: a
model's prompt, system and embeddings input are always text (a list, struct or map
column is a dead letter, never the API's content blocks), and a NaN or an infinity is a
dead letter, never a bare ``NaN`` on the wire. Refused records are never sent."""

from __future__ import annotations

import math
from typing import Any

import pytest

from spark_jobs.enrichers import FieldValueError, HttpEnricher, HttpEnricherConfig
from spark_jobs.enrichers.model_endpoint import ModelConfig, request_options

from .echo_api import EchoApi

BLOCKS = [{"type": "image_url", "image_url": {"url": "https://elsewhere.example/x.png"}}]


def enricher(api: EchoApi, **options: Any) -> HttpEnricher:
    """The HTTP enricher keeping the whole body the API got (``$.got``) as JSON text."""
    config = {"url_template": api.url + "/echo/call", "cache_size": 0, **options}
    config["response_fields"] = {"got": ["$.got", "json"]}
    return HttpEnricher(HttpEnricherConfig.from_dict(config))


def model_options(api: EchoApi, config: ModelConfig) -> dict[str, Any]:
    return request_options(config, {"url_template": api.url + "/echo/call"})


async def outcome(enrich: HttpEnricher, record: dict[str, Any]) -> Any:
    try:
        return await enrich(record)
    except FieldValueError as error:
        return error


@pytest.mark.parametrize("api_kind", ["chat", "anthropic", "embeddings"])
async def test_a_prompt_of_one_placeholder_is_text_and_a_list_column_is_refused(api_kind):
    parameters = {"max_tokens": 5} if api_kind == "anthropic" else {}
    system = "{role}" if api_kind != "embeddings" else None
    config = ModelConfig(
        model="m", prompt="{text}", system=system, api=api_kind, parameters=parameters
    )
    with EchoApi() as api:
        async with enricher(api, **model_options(api, config)) as enrich:
            sent = await outcome(enrich, {"id": "a", "text": 42, "role": True})
            blocks = await outcome(enrich, {"id": "b", "text": BLOCKS, "role": "r"})
            struct = await outcome(enrich, {"id": "c", "text": "t", "role": {"file_id": "f"}})
    got = api.calls[0]["got"]
    if api_kind == "embeddings":
        assert got["input"] == "42"
    else:
        assert got["messages"][-1]["content"] == "42"
        system_text = got["system"] if api_kind == "anthropic" else got["messages"][0]["content"]
        assert system_text == "true"
    assert isinstance(sent, dict)
    assert isinstance(blocks, FieldValueError) and "holds a list" in str(blocks)
    assert "'text' as text" in str(blocks) and "elsewhere" not in str(blocks)
    if api_kind == "embeddings":
        assert isinstance(struct, dict)  # no system prompt: the struct is not sent
    else:
        assert isinstance(struct, FieldValueError) and "holds a dict" in str(struct)
    assert len(api.calls) == 1 + (api_kind == "embeddings"), "a refused record is never sent"


async def test_nan_and_infinity_in_a_body_are_refused_never_sent_as_bare_nan():
    body = {"score": "{score}", "nested": "{nested}", "line": "score {score}"}
    with EchoApi() as api:
        async with enricher(api, method="POST", body_template=body, key_field="id") as enrich:
            nan = await outcome(enrich, {"id": "a", "score": math.nan, "nested": None})
            inf = await outcome(enrich, {"id": "b", "score": 1.5, "nested": {"x": [math.inf]}})
            fine = await outcome(enrich, {"id": "c", "score": 1.5, "nested": {"x": [2.0]}})
    assert isinstance(nan, FieldValueError) and isinstance(inf, FieldValueError)
    assert "field 'score' of record id='a' holds NaN or an infinity" in str(nan)
    assert "field 'nested' of record id='b'" in str(inf)
    assert isinstance(fine, dict)
    assert [call["got"] for call in api.calls] == [
        {"score": 1.5, "nested": {"x": [2.0]}, "line": "score 1.5"}
    ]
