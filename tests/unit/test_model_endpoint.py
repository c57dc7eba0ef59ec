"""The model-endpoint enricher's pure parts: the providers' limit headers, the output
schema (typed columns, validation), each answer's class, the request body and the config."""

import asyncio
import dataclasses
import json
import re

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict

from spark_jobs.enrichers import InvalidResponseError
from spark_jobs.enrichers.attempt import Reply
from spark_jobs.enrichers.model_endpoint import (
    ContentFilteredError,
    InvalidOutputError,
    ModelAnswers,
    ModelConfig,
    ModelPacing,
    RefusedError,
    request_options,
)
from spark_jobs.enrichers.model_endpoint.config import TOKEN_COLUMNS
from spark_jobs.enrichers.model_endpoint.output_schema import OutputMismatch, columns, conform
from spark_jobs.enrichers.model_endpoint.pacing import LIMIT_SHARE
from spark_jobs.enrichers.rate_control import RateController
from spark_jobs.enrichers.rate_headers import MAX_RESET_S, TokenQuota, quota_hint, token_quotas
from spark_jobs.enrichers.templates import BodyTemplate
from spark_jobs.records.cost import CostReport
from spark_jobs.spec.model_options import token_report

SCHEMA = {
    "type": "object",
    "properties": {
        "label": {"type": "string", "enum": ["spam", "ham"]},
        "score": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "source": {
            "type": ["object", "null"],
            "properties": {"name": {"type": "string"}, "rank": {"type": "integer"}},
        },
    },
    "required": ["label", "score"],
    "additionalProperties": False,
}


def _no_redact(text: str) -> str:
    return text


# -- headers ------------------------------------------------------------------------------


NO_BATCH = {"batch_prompt_tokens": 0, "batch_completion_tokens": 0}


def test_openai_headers_give_limits_remaining_and_reset():
    headers = CIMultiDict(
        {
            "x-ratelimit-limit-requests": "500",
            "x-ratelimit-limit-tokens": "30000",
            "x-ratelimit-remaining-tokens": "120",
            "x-ratelimit-reset-tokens": "1m0s",
        }
    )
    assert token_quotas(headers) == {"tokens": TokenQuota(30000, 120, 60.0)}
    assert quota_hint(headers).limit == 500


def test_anthropic_headers_with_rfc3339_resets_and_input_output_apart():
    headers = CIMultiDict(
        {
            "anthropic-ratelimit-requests-limit": "50",
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-reset": "2026-01-01T00:00:10Z",
            "anthropic-ratelimit-input-tokens-limit": "40000",
            "anthropic-ratelimit-input-tokens-remaining": "39000",
            "anthropic-ratelimit-input-tokens-reset": "2026-01-01T00:00:03+00:00",
            "anthropic-ratelimit-output-tokens-limit": "8000",
            "anthropic-ratelimit-output-tokens-remaining": "100",
            "anthropic-ratelimit-output-tokens-reset": "2026-01-01T00:00:59Z",
        }
    )
    now = 1767225600.0  # 2026-01-01T00:00:00Z
    quotas = token_quotas(headers, now=now)
    # "rounded to the nearest thousand": 39 000 may be 38 500
    assert quotas["input_tokens"] == TokenQuota(40000, 38500, pytest.approx(3.0), rounded=True)
    assert quotas["output_tokens"] == TokenQuota(8000, 100, pytest.approx(59.0))
    assert "tokens" not in quotas
    requests = quota_hint(headers)
    assert requests.limit == 50 and requests.exhausted


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "lots", ""])
def test_nonsense_limits_count_as_absent(value):
    headers = CIMultiDict(
        {
            "x-ratelimit-limit-requests": value,
            "x-ratelimit-limit-tokens": value,
            "x-ratelimit-remaining-tokens": "-1",
            "x-ratelimit-reset-tokens": "-1",
        }
    )
    assert token_quotas(headers) == {}
    assert quota_hint(headers).limit is None


def test_no_limit_headers_state_nothing():
    assert token_quotas(CIMultiDict({"Content-Type": "application/json"})) == {}


# -- pacing -------------------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _reply(status: int, headers: dict[str, str], usage=(10, 20), api="chat") -> Reply:
    names = ("input_tokens", "output_tokens") if api == "anthropic" else TOKEN_COLUMNS
    body = {"usage": dict(zip(names, usage, strict=True))}
    return Reply(status, json.dumps(body).encode(), CIMultiDict(headers))


def _openai(limit: float, remaining: float, reset: str) -> dict[str, str]:
    return {
        "x-ratelimit-limit-tokens": str(limit),
        "x-ratelimit-remaining-tokens": str(remaining),
        "x-ratelimit-reset-tokens": reset,
    }


def _admit(pacing, text="x"):
    return asyncio.run(pacing.admit(json.dumps({"messages": [{"content": text}]})))


def test_token_limit_learned_from_headers_per_partition_share():
    config = ModelConfig(model="m", prompt="{x}", limits_window_s=60.0)
    pacing = ModelPacing(config, partitions=2, clock=_Clock())
    assert pacing.limits == {}  # nothing known yet: no token pacing
    call = _admit(pacing)
    pacing.settle(call, _reply(200, {"x-ratelimit-limit-tokens": "12000"}), RateController(None))
    assert pacing.limits["tokens"].rate == pytest.approx(12000 * LIMIT_SHARE / 60 / 2)
    assert pacing.counters == {"prompt_tokens": 10, "completion_tokens": 20, **NO_BATCH}


def test_openai_charges_prompt_plus_max_tokens_at_admission_and_gives_nothing_back():
    """OpenAI's documented rule: the charge is the prompt estimate plus max_tokens, made
    when the request is admitted, whatever the answer's length."""
    clock = _Clock()
    config = ModelConfig(
        model="m", prompt="{x}", tokens_per_minute=60_000, parameters={"max_tokens": 200}
    )
    pacing = ModelPacing(config, partitions=1, clock=clock)
    limit = pacing.limits["tokens"]
    clock.now += 10  # a second's worth saved up: room for a call
    before = limit.level
    call = _admit(pacing)
    assert call.charges["tokens"] == pytest.approx(call.prompt + 200)
    assert limit.level == pytest.approx(before - call.prompt - 200)
    pacing.settle(call, _reply(200, {}, usage=(call.prompt, 5)), RateController(None))
    assert limit.level == pytest.approx(before - call.prompt - 200)
    assert pacing.counters["completion_tokens"] == 5


def test_anthropic_limits_input_and_output_apart_and_adjusts_the_output_at_the_end():
    clock = _Clock()
    config = ModelConfig(model="m", prompt="{x}", api="anthropic", parameters={"max_tokens": 100})
    pacing = ModelPacing(config, partitions=1, clock=clock)
    first = _admit(pacing)  # no limit known yet: not paced
    stated = {
        "anthropic-ratelimit-input-tokens-limit": "60000",
        "anthropic-ratelimit-input-tokens-remaining": "60000",
        "anthropic-ratelimit-output-tokens-limit": "6000",
        "anthropic-ratelimit-output-tokens-remaining": "5900",
    }
    answer = _reply(200, stated, usage=(first.prompt, 40), api="anthropic")
    pacing.settle(first, answer, RateController(None))
    output = pacing.limits["output_tokens"]
    assert set(pacing.limits) == {"input_tokens", "output_tokens"}
    assert output.level == pytest.approx(5900 * LIMIT_SHARE)
    call = _admit(pacing)
    assert call.charges == {"input_tokens": call.prompt, "output_tokens": 100}
    assert output.level == pytest.approx(5900 * LIMIT_SHARE - 100)
    answer = _reply(200, {}, usage=(call.prompt, 30), api="anthropic")
    pacing.settle(call, answer, RateController(None))
    assert output.level == pytest.approx(5900 * LIMIT_SHARE - 30)  # 70 unused came back


def test_a_refused_call_gives_its_whole_charge_back():
    clock = _Clock()
    config = ModelConfig(model="m", prompt="{x}", tokens_per_minute=60000)
    pacing = ModelPacing(config, partitions=1, clock=clock)
    limit = pacing.limits["tokens"]
    clock.now += 10
    before = limit.level
    call = _admit(pacing)
    assert limit.level < before
    pacing.settle(call, _reply(429, {}), RateController(None))
    assert limit.level == pytest.approx(before)
    assert pacing.counters == {"prompt_tokens": 0, "completion_tokens": 0, **NO_BATCH}


def test_the_stated_remaining_is_the_level_less_what_it_has_not_counted():
    """The provider's count corrects the level both ways (a spent window of another
    client, an estimate too high), less the calls admitted after the answered one."""
    clock = _Clock()
    config = ModelConfig(model="m", prompt="{x}", limits_window_s=60.0)
    pacing = ModelPacing(config, partitions=2, clock=clock)
    answered, later = _admit(pacing), _admit(pacing)
    pacing.settle(answered, _reply(200, _openai(60000, 50000, "10s")), RateController(None))
    limit = pacing.limits["tokens"]
    assert limit.level == pytest.approx(50000 * LIMIT_SHARE / 2 - later.charges.get("tokens", 0))
    pacing.settle(later, _reply(200, _openai(60000, 100, "59.9s")), RateController(None))
    assert limit.level == pytest.approx(100 * LIMIT_SHARE / 2)


@pytest.mark.parametrize("remaining", [1e12, 59_000])
def test_a_stated_remaining_never_lifts_the_configured_limit(remaining):
    clock = _Clock()
    config = ModelConfig(model="m", prompt="{x}", tokens_per_minute=1000)
    pacing = ModelPacing(config, partitions=1, clock=clock)
    clock.now += 60
    call = _admit(pacing)
    headers = _openai(60000, remaining, "1s")
    pacing.settle(call, _reply(200, headers), RateController(None))
    limit = pacing.limits["tokens"]
    assert limit.capacity == pytest.approx(1000 * LIMIT_SHARE)
    assert limit.level <= 1000 * LIMIT_SHARE


def test_a_spent_bucket_refills_at_its_rate_not_at_its_reset():
    """OpenAI's reset is the time until the bucket is full: a call that needs a fraction
    of the limit waits that fraction of the window, not the whole reset."""
    clock = _Clock()
    config = ModelConfig(model="m", prompt="{x}", limits_window_s=60.0)
    pacing = ModelPacing(config, partitions=1, clock=clock)
    call = _admit(pacing)
    pacing.settle(call, _reply(200, _openai(6000, 0, "1m0s")), RateController(None))
    limit = pacing.limits["tokens"]
    assert not limit.fixed_window
    wait = limit.wait_for(50)
    assert wait == pytest.approx(50 / (6000 * LIMIT_SHARE / 60), rel=0.01)
    assert wait < 2.0


def test_a_fixed_window_tells_itself_from_its_resets_and_turns_whole():
    """A window's reset is the time to its turn, whatever is left: after a few answers
    the level waits for the turn and then holds the whole share at once."""
    clock = _Clock()
    config = ModelConfig(model="m", prompt="{x}", limits_window_s=10.0)
    pacing = ModelPacing(config, partitions=1, clock=clock)
    for spent in range(1, 7):
        call = _admit(pacing)
        left = 3000 - 100 * spent
        pacing.settle(call, _reply(200, _openai(3000, left, "8s")), RateController(None))
    limit = pacing.limits["tokens"]
    assert limit.fixed_window
    pacing.settle(_admit(pacing), _reply(200, _openai(3000, 0, "8s")), RateController(None))
    assert limit.wait_for(50) == pytest.approx(8.0, abs=0.01)
    clock.now += 8.0
    assert limit.wait_for(50) == 0 and limit.level == pytest.approx(3000 * LIMIT_SHARE)


def test_a_remaining_rounded_to_thousands_is_taken_at_its_lower_bound():
    """Anthropic rounds its remaining tokens to the nearest thousand: 3 000 may be 2 500."""
    clock = _Clock()
    config = ModelConfig(model="m", prompt="{x}", api="anthropic", parameters={"max_tokens": 9})
    pacing = ModelPacing(config, partitions=1, clock=clock)
    call = _admit(pacing)
    stated = {
        "anthropic-ratelimit-output-tokens-limit": "8000",
        "anthropic-ratelimit-output-tokens-remaining": "3000",
    }
    pacing.settle(
        call, _reply(200, stated, usage=(call.prompt, 9), api="anthropic"), RateController(None)
    )
    assert pacing.limits["output_tokens"].level == pytest.approx(2500 * LIMIT_SHARE)


def test_a_refusal_on_a_token_limit_pauses_it_for_the_answer_s_retry_delay():
    """Azure states the remaining tokens but neither the limit's reset nor its refill:
    its 429's retry-after-ms says when the limit takes calls again."""
    clock = _Clock()
    config = ModelConfig(model="m", prompt="{x}", provider="azure")
    pacing = ModelPacing(config, partitions=1, clock=clock)
    first = _admit(pacing)
    pacing.settle(
        first, _reply(200, {"x-ratelimit-remaining-tokens": "6000"}), RateController(None)
    )
    refused = _admit(pacing)
    headers = {"x-ratelimit-remaining-tokens": "10", "retry-after-ms": "2500"}
    pacing.settle(refused, _reply(429, headers), RateController(None))
    limit = pacing.limits["tokens"]
    assert limit.wait_for(1) == pytest.approx(2.5)
    clock.now += 2.5
    assert limit.wait_for(1) == 0


def test_hostile_resets_and_usage_never_stall_the_partition():
    clock = _Clock()
    config = ModelConfig(model="m", prompt="{x}", limits_window_s=60.0)
    pacing = ModelPacing(config, partitions=1, clock=clock)
    first, second = _admit(pacing), _admit(pacing)  # nothing known yet: both go
    pacing.settle(first, _reply(200, _openai(1, 0, "99999h")), RateController(None))
    pacing.settle(second, _reply(200, {}, usage=(10**19, 10**19)), RateController(None))
    assert pacing.counters["prompt_tokens"] < 10**6
    assert pacing.limits["tokens"].wait_for(10**12) <= 60.0 + MAX_RESET_S


async def test_a_call_waits_at_most_a_window_and_the_longest_reset_in_all():
    """A hostile limit of one token a minute: the call waits its bounded time and goes."""
    clock = _Clock()
    config = ModelConfig(model="m", prompt="{x}", limits_window_s=1.0)
    pacing = ModelPacing(config, partitions=1, clock=clock)
    first, second = await pacing.admit("{}"), await pacing.admit("{}")  # nothing known yet
    pacing.settle(first, _reply(200, _openai(1, 0, "1s")), RateController(None))
    waiting = asyncio.ensure_future(pacing.admit("{}"))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    clock.now += 1.0 + MAX_RESET_S
    pacing.settle(second, _reply(200, {}), RateController(None))  # wakes the waiting call
    await asyncio.wait_for(waiting, 2.0)


def test_the_reservation_learns_what_the_provider_counts_of_the_estimated_prompt():
    clock = _Clock()
    config = ModelConfig(model="m", prompt="{x}", limits_window_s=60.0)
    pacing = ModelPacing(config, partitions=1, clock=clock)
    text = "word " * 100
    pacing.settle(_admit(pacing, text), _reply(200, _openai(1e9, 1e9, "0s")), RateController(None))
    first = _admit(pacing, text)
    for _ in range(60):  # the provider counts a quarter of the estimate
        call = _admit(pacing, text)
        pacing.settle(call, _reply(200, {}, usage=(call.prompt // 4, 20)), RateController(None))
    later = _admit(pacing, text)
    assert later.prompt == first.prompt  # the estimate itself (and its cost) stays
    reserve = config.completion_reserve
    assert later.charges["tokens"] - reserve == pytest.approx(first.prompt / 4, rel=0.05)


# -- output schema ------------------------------------------------------------------------


def test_schema_properties_become_typed_columns_with_structs_and_arrays():
    assert columns(SCHEMA) == {
        "label": pa.string(),
        "score": pa.float64(),
        "tags": pa.list_(pa.string()),
        "source": pa.struct([("name", pa.string()), ("rank", pa.int64())]),
    }


@pytest.mark.parametrize(
    ("schema", "path"),
    [
        ({"type": "object", "properties": {"a": {"oneOf": []}}}, "$.a"),
        ({"type": "object", "properties": {"a": {"type": "array", "items": {}}}}, "$.a[]"),
        ({"type": "object", "properties": {"a": {"type": ["string", "integer"]}}}, "$.a"),
    ],
)
def test_unsupported_schema_parts_are_named_by_path(schema, path):
    with pytest.raises(ValueError, match="output_schema at ") as raised:
        columns(schema)
    assert str(raised.value).startswith(f"output_schema at {path}:")


def test_conform_fills_absent_optional_properties_and_converts_numbers():
    value = conform({"label": "ham", "score": 1, "tags": []}, SCHEMA)
    assert value == {"label": "ham", "score": 1.0, "tags": [], "source": None}
    assert isinstance(value["score"], float)


@pytest.mark.parametrize(
    ("answer", "where"),
    [
        ({"score": 0.5}, "missing required 'label'"),
        ({"label": "eggs", "score": 0.5}, r"\$.label: 'eggs' is not one of"),
        ({"label": "ham", "score": "high"}, r"\$.score: expected number"),
        ({"label": "ham", "score": 1, "tags": [1]}, r"\$.tags\[0\]: expected string"),
        (
            {"label": "ham", "score": 1, "source": {"rank": 1.5}},
            r"\$.source.rank: expected integer",
        ),
        ({"label": "ham", "score": 1, "extra": 1}, "unexpected 'extra'"),
        ([1], r"\$: expected an object"),
    ],
)
def test_answers_not_of_the_schema_name_the_path(answer, where):
    with pytest.raises(OutputMismatch, match=where):
        conform(answer, SCHEMA)


# -- answers ------------------------------------------------------------------------------


def _chat(message: dict, finish: str = "stop") -> bytes:
    choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
    return json.dumps(
        {"choices": [choice], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}
    ).encode()


def test_a_structured_answer_becomes_its_columns_and_usage():
    answers = ModelAnswers(ModelConfig(model="m", prompt="{x}", output_schema=SCHEMA))
    text = json.dumps({"label": "spam", "score": 0.9, "tags": ["x"]})
    output = answers(_chat({"content": text}), "here", _no_redact)
    assert output == {
        "label": "spam",
        "score": 0.9,
        "tags": ["x"],
        "source": None,
        "prompt_tokens": 7,
        "completion_tokens": 3,
    }


@pytest.mark.parametrize(
    ("payload", "error", "kept"),
    [
        (_chat({"content": '{"label": "sp'}), InvalidOutputError, '{"label": "sp'),
        (_chat({"content": '{"label": "x", "score": 1}'}), InvalidOutputError, "is not one of"),
        (_chat({"content": None, "refusal": "I can't"}), RefusedError, "I can't"),
        (_chat({"content": None}, "content_filter"), ContentFilteredError, "withheld"),
        (b"{not json", InvalidResponseError, "invalid JSON"),
    ],
)
def test_each_unusable_answer_has_its_own_class(payload, error, kept):
    answers = ModelAnswers(ModelConfig(model="m", prompt="{x}", output_schema=SCHEMA))
    with pytest.raises(error, match=None) as raised:
        answers(payload, "here", _no_redact)
    assert kept in str(raised.value)


def test_invalid_output_keeps_the_raw_text_and_is_redacted():
    answers = ModelAnswers(ModelConfig(model="m", prompt="{x}", output_schema=SCHEMA))
    raw = '{"label": "SECRET'
    with pytest.raises(InvalidOutputError) as raised:
        answers(_chat({"content": raw}), "here", lambda t: t.replace("SECRET", "***"))
    assert 'raw: \'{"label": "***\'' in str(raised.value)


def test_anthropic_text_refusal_and_usage():
    config = ModelConfig(model="c", prompt="{x}", api="anthropic", parameters={"max_tokens": 9})
    answers = ModelAnswers(config)
    body = {"content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn"}
    body["usage"] = {"input_tokens": 4, "output_tokens": 1}
    assert answers(json.dumps(body).encode(), "w", _no_redact) == {
        "answer": "hi",
        "prompt_tokens": 4,
        "completion_tokens": 1,
    }
    refused = json.dumps({"content": [], "stop_reason": "refusal"}).encode()
    with pytest.raises(RefusedError):
        answers(refused, "w", _no_redact)


def test_embeddings_land_as_float_lists():
    config = ModelConfig(model="e", prompt="{text}", api="embeddings")
    assert config.output_types()["embedding"] == pa.list_(pa.float32())
    body = {"data": [{"embedding": [0.5, -1, 0.25]}], "usage": {"prompt_tokens": 2}}
    output = ModelAnswers(config)(json.dumps(body).encode(), "w", _no_redact)
    assert output == {"embedding": [0.5, -1.0, 0.25], "prompt_tokens": 2, "completion_tokens": 0}


# -- requests and config ------------------------------------------------------------------


def test_the_body_fills_only_the_prompt_and_keeps_literal_braces():
    schema = {**SCHEMA, "description": "a {label} and {score}"}
    config = ModelConfig(
        model="m{1}",
        prompt="Classify {title}: {{not a field}}",
        system="You sort {kind}",
        output_schema=schema,
        parameters={"temperature": 0, "stop": ["}"]},
    )
    options = request_options(config, {"headers": {"X-Team": "a"}})
    body = BodyTemplate(options["body_template"], "model").fill({"title": "T", "kind": "mail"})
    assert body["model"] == "m{1}" and body["stop"] == ["}"]
    assert body["messages"] == [
        {"role": "system", "content": "You sort mail"},
        {"role": "user", "content": "Classify T: {not a field}"},
    ]
    assert (
        body["response_format"]["json_schema"]["schema"]["description"] == "a {label} and {score}"
    )
    assert options["method"] == "POST" and options["headers"] == {"X-Team": "a"}


def test_requests_per_minute_becomes_the_request_rate_the_lower_one_wins():
    config = ModelConfig(model="m", prompt="{x}", requests_per_minute=120)
    assert request_options(config, {})["requests_per_second"] == 2.0
    assert request_options(config, {"requests_per_second": 1.0})["requests_per_second"] == 1.0


def test_a_self_hosted_server_gets_the_latency_guided_concurrency_unless_told_otherwise():
    hosted = ModelConfig(model="m", prompt="{x}", provider="self-hosted")
    assert request_options(hosted, {})["concurrency"] == "latency"
    assert "concurrency" not in request_options(hosted, {"concurrency": "fixed"})
    assert "concurrency" not in request_options(ModelConfig(model="m", prompt="{x}"), {})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"model": "m"}, "prompt required"),
        ({"model": "m", "prompt": "{a.b}"}, "must be a record field name"),
        ({"model": "m", "prompt": "x", "api": "completions"}, "model.api must be one of"),
        ({"model": "m", "prompt": "x", "api": "anthropic"}, "max_tokens is required"),
        ({"model": "m", "prompt": "x", "temprature": 1}, "unknown field"),
        ({"model": "m", "prompt": "x", "tokens_per_minute": -5}, "model.tokens_per_minute"),
        (
            {"model": "m", "prompt": "x", "output_schema": {"type": "string"}},
            "top level must be an object",
        ),
    ],
)
def test_bad_model_config_names_the_field(data, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_dict(data)


def test_method_other_than_post_is_refused():
    config = ModelConfig(model="m", prompt="{x}")
    with pytest.raises(ValueError, match="POST"):
        request_options(config, {"method": "GET"})


def test_fingerprint_moves_with_prompt_not_with_limits():
    base = ModelConfig(model="m", prompt="{x}")
    assert (
        base.fingerprint()
        == ModelConfig(model="m", prompt="{x}", tokens_per_minute=5).fingerprint()
    )
    assert base.fingerprint() != ModelConfig(model="m", prompt="Q: {x}").fingerprint()
    assert ModelConfig.from_dict(base.to_dict()) == base


# -- the job spec -------------------------------------------------------------------------


def _spec(*extra: str, model: dict | None = None):
    from spark_jobs.spec.job_cli import parse_args

    model = model or {"model": "m", "prompt": "Classify {title}", "output_schema": SCHEMA}
    return parse_args(
        [
            *("--input", "in", "--output", "out", "--key-column", "id"),
            *("--snapshot-dir", "snap", "--url-template", "http://api/v1/chat/completions"),
            *("--model", json.dumps(model), *extra),
        ]
    )


def test_a_model_spec_takes_its_columns_from_the_schema_and_posts():
    spec = _spec()
    assert list(spec.response_fields) == [
        "label",
        "score",
        "tags",
        "source",
        "prompt_tokens",
        "completion_tokens",
    ]
    config = spec.http_config()
    assert config.method == "POST" and config.body_template["model"] == "m"
    changed = _spec(model={"model": "m", "prompt": "Label {title}", "output_schema": SCHEMA})
    assert spec.enrichment_identity() != changed.enrichment_identity()
    assert type(spec).from_json(spec.to_json()) == spec


@pytest.mark.parametrize(
    ("extra", "model", "message"),
    [
        (("--max-cost", "5"), None, "--max-cost: needs model.price_input/output_per_million"),
        (("--method", "GET"), None, "POST"),
        (("--resend-stragglers",), None, "http: resend_stragglers: only idempotent methods"),
        (("--hedge-after", "p95"), None, "http: hedge_after: only idempotent methods"),
        ((), {"model": "m"}, "--model: model: prompt required"),
        (("--response-field", "x=$.x"), None, "--response-field: a model run's columns"),
    ],
)
def test_bad_model_options_name_the_option(extra, model, message):
    from spark_jobs.spec.spec_error import SpecError

    with pytest.raises(SpecError, match=re.escape(message)):
        _spec(*extra, model=model)


def test_max_cost_needs_a_model_and_excludes_max_requests():
    from spark_jobs.spec.job_cli import parse_args
    from spark_jobs.spec.spec_error import SpecError

    base = ["--input", "in", "--output", "out", "--key-column", "id", "--snapshot-dir", "s"]
    http = ["--url-template", "http://api/{id}", "--response-field", "a=$.a"]
    with pytest.raises(SpecError, match="--max-cost: prices a model section"):
        parse_args([*base, *http, "--max-cost", "1"])
    priced = {"model": "m", "prompt": "{t}", "price_input_per_million": 1.0}
    with pytest.raises(SpecError, match="give --max-cost or --max-requests"):
        _spec("--max-cost", "1", "--max-requests", "5", model=priced)


def test_prompt_tokens_count_the_texts_not_the_json_around_them():
    from spark_jobs.enrichers.model_endpoint.tokens import MESSAGE_TOKENS, prompt_tokens

    config = ModelConfig(model="m", prompt="{t}", system="abcd" * 3)
    body = BodyTemplate(request_options(config, {})["body_template"], "m").fill({"t": "x" * 40})
    assert prompt_tokens(json.dumps(body)) == 10 + 3 + 2 * MESSAGE_TOKENS
    assert prompt_tokens(json.dumps({"model": "e", "input": "y" * 8})) == 2
    assert prompt_tokens("not json at all") == 4
    assert prompt_tokens(json.dumps({"model": "e", "input": ["y" * 8, "z" * 5, "w"]})) == 5


def test_batch_mode_prices_at_half_and_works_with_the_two_batch_apis_only():
    online = ModelConfig(model="m", prompt="{t}", price_input_per_million=2.0)
    batch = dataclasses.replace(online, mode="batch")
    assert batch.cost(1000, 0) == pytest.approx(online.cost(1000, 0) / 2)
    assert batch.fingerprint() == online.fingerprint()
    with pytest.raises(ValueError, match=r"model\.mode: batch works with the openai and anthropic"):
        ModelConfig(model="m", prompt="{t}", provider="azure", mode="batch")
    with pytest.raises(ValueError, match=r"model\.mode must be one of online, batch"):
        ModelConfig(model="m", prompt="{t}", mode="later")  # type: ignore[arg-type]


def test_a_run_that_switched_modes_pays_each_token_at_the_price_of_its_mode():
    """Online before a budget stop, batch after: the ledger prices each part as paid."""
    config = ModelConfig(
        model="m", prompt="{t}", price_input_per_million=2.0, price_output_per_million=8.0
    )
    totals = {
        "prompt_tokens": 3000,
        "completion_tokens": 1000,
        "batch_prompt_tokens": 1000,
        "batch_completion_tokens": 500,
    }
    expected = (2000 * 2 + 500 * 8 + (1000 * 2 + 500 * 8) / 2) / 1e6
    for mode in ("online", "batch"):  # whichever mode the run ended in
        report = token_report(dataclasses.replace(config, mode=mode), totals, CostReport())
        assert report.token_cost == pytest.approx(expected)
        assert report.batch_prompt_tokens == 1000


# -- embeddings: many inputs a request ------------------------------------------------------


def test_embeddings_take_the_provider_s_documented_bounds_a_request_by_default():
    def bounds(**given):
        config = ModelConfig(model="e", prompt="{t}", api="embeddings", **given)
        return config.inputs_a_request, config.tokens_a_request

    assert bounds() == (2048, 300_000)
    assert bounds(provider="azure") == (2048, 8_192)
    assert bounds(provider="self-hosted") == (32, 16_384)
    assert bounds(inputs_per_request=100, tokens_per_request=5_000) == (100, 5_000)
    assert ModelConfig(model="m", prompt="{t}").inputs_a_request == 1
    tuned = ModelConfig(model="e", prompt="{t}", api="embeddings", inputs_per_request=7)
    assert (
        tuned.fingerprint() == ModelConfig(model="e", prompt="{t}", api="embeddings").fingerprint()
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"api": "chat", "inputs_per_request": 8}, "only embeddings take many inputs"),
        ({"api": "embeddings", "inputs_per_request": 0}, "model.inputs_per_request"),
        ({"api": "embeddings", "tokens_per_request": True}, "model.tokens_per_request"),
        ({"api": "embeddings", "input_wait_s": 0}, "model.input_wait_s"),
    ],
)
def test_bad_input_batching_names_the_field(data, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_dict({"model": "m", "prompt": "{t}", **data})


def test_one_input_a_request_or_another_api_sends_each_record_alone():
    from spark_jobs.enrichers.model_endpoint.embedding_batches import embedding_batches

    alone = ModelConfig(model="e", prompt="{t}", api="embeddings", inputs_per_request=1)
    assert embedding_batches(alone, 4) is None
    assert embedding_batches(ModelConfig(model="m", prompt="{t}"), 4) is None
    paced = ModelConfig(model="e", prompt="{t}", api="embeddings", tokens_per_minute=100_000)
    factory = embedding_batches(paced, 4)
    assert factory is not None
    assert factory.tokens_a_request == int(100_000 * LIMIT_SHARE / 4), "within the share"


@settings(max_examples=200, deadline=None)
@given(total=st.integers(0, 10**6), weights=st.lists(st.integers(0, 10**4), min_size=1))
def test_a_request_s_usage_is_shared_out_in_whole_tokens_that_add_up(total, weights):
    from spark_jobs.enrichers.model_endpoint.embedding_batches import shares_of

    shares = shares_of(total, weights)
    assert sum(shares) == total and min(shares) >= 0
    if any(weights):
        whole = sum(weights)
        assert all(abs(s - total * w / whole) < 1 for s, w in zip(shares, weights, strict=True))
    if total == sum(weights):
        assert shares == weights, "an exact estimate gives each input its own count"


def test_embeddings_many_a_request_let_the_whole_queue_call_to_fill_requests():
    embed = {"model": "e", "prompt": "{title}", "api": "embeddings"}
    assert _spec(model=embed).operator_call_capacity is None
    alone = _spec(model={**embed, "inputs_per_request": 1})
    assert alone.operator_call_capacity == alone.capacity
