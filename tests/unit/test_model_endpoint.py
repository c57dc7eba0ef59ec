"""The model-endpoint enricher's pure parts: the providers' limit headers, the output
schema (typed columns, validation), each answer's class, the request body and the config."""

import asyncio
import dataclasses
import json
import re

import pyarrow as pa
import pytest
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
from spark_jobs.enrichers.model_endpoint.limits import provider_limits
from spark_jobs.enrichers.model_endpoint.output_schema import OutputMismatch, columns, conform
from spark_jobs.enrichers.model_endpoint.pacing import LIMIT_SHARE
from spark_jobs.enrichers.rate_control import RateController
from spark_jobs.enrichers.templates import BodyTemplate

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


def test_openai_headers_give_limits_remaining_and_reset():
    headers = CIMultiDict(
        {
            "x-ratelimit-limit-requests": "500",
            "x-ratelimit-limit-tokens": "30000",
            "x-ratelimit-remaining-tokens": "120",
            "x-ratelimit-reset-tokens": "1m0s",
        }
    )
    limits = provider_limits(headers)
    assert limits is not None
    assert (limits.requests_limit, limits.tokens_limit) == (500, 30000)
    assert (limits.tokens_remaining, limits.tokens_reset_s) == (120, 60.0)


def test_anthropic_headers_with_rfc3339_resets():
    headers = CIMultiDict(
        {
            "anthropic-ratelimit-requests-limit": "50",
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-reset": "2026-01-01T00:00:10Z",
            "anthropic-ratelimit-tokens-limit": "40000",
            "anthropic-ratelimit-tokens-remaining": "39000",
            "anthropic-ratelimit-tokens-reset": "2026-01-01T00:00:03+00:00",
        }
    )
    now = 1767225600.0  # 2026-01-01T00:00:00Z
    limits = provider_limits(headers, now=now)
    assert limits is not None and limits.requests is not None
    assert limits.requests_limit == 50 and limits.tokens_limit == 40000
    assert limits.tokens_reset_s == pytest.approx(3.0)
    assert limits.requests.exhausted and limits.requests.reset_s == pytest.approx(10.0)


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
    limits = provider_limits(headers)
    assert limits is not None
    assert limits.requests_limit is None and limits.tokens_limit is None
    assert limits.tokens_remaining is None and limits.tokens_reset_s is None


def test_no_limit_headers_state_nothing():
    assert provider_limits(CIMultiDict({"Content-Type": "application/json"})) is None


# -- pacing -------------------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _reply(status: int, headers: dict[str, str], usage=(10, 20)) -> Reply:
    body = {"usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1]}}
    return Reply(status, json.dumps(body).encode(), None, CIMultiDict(headers))


def test_token_limit_learned_from_headers_per_partition_share():
    config = ModelConfig(model="m", prompt="{x}", limits_window_s=60.0)
    pacing = ModelPacing(config, partitions=2, clock=_Clock())
    assert pacing.bucket is None  # nothing known yet: no token pacing
    rate = RateController(None)
    pacing.settle(_admitted(pacing), _reply(200, {"x-ratelimit-limit-tokens": "12000"}), rate)
    assert pacing.bucket is not None
    assert pacing.bucket.per_second == pytest.approx(12000 * LIMIT_SHARE / 60 / 2)
    assert pacing.counters == {"prompt_tokens": 10, "completion_tokens": 20}


def test_nonsense_headers_keep_the_configured_limits():
    config = ModelConfig(model="m", prompt="{x}", tokens_per_minute=6000, requests_per_minute=60)
    pacing = ModelPacing(config, partitions=1, clock=_Clock())
    rate = RateController(1.0)
    configured = pacing.bucket.per_second
    nonsense = {
        f"x-ratelimit-{n}-{k}": "-1"
        for n in ("limit", "remaining", "reset")
        for k in ("requests", "tokens")
    }
    pacing.settle(_admitted(pacing), _reply(200, nonsense), rate)
    assert pacing.bucket.per_second == configured
    assert pacing.bucket.paused_until < 100.0
    assert rate.rate == 1.0


def test_a_lower_stated_limit_wins_and_a_spent_one_pauses_until_reset():
    clock = _Clock()
    config = ModelConfig(model="m", prompt="{x}", tokens_per_minute=60000)
    pacing = ModelPacing(config, partitions=1, clock=clock)
    headers = {
        "x-ratelimit-limit-tokens": "6000",
        "x-ratelimit-remaining-tokens": "5",
        "x-ratelimit-reset-tokens": "2s",
    }
    pacing.settle(_admitted(pacing), _reply(200, headers), RateController(None))
    assert pacing.bucket.per_second == pytest.approx(6000 * LIMIT_SHARE / 60)
    assert pacing.bucket.paused_until == pytest.approx(102.0)
    assert pacing.bucket.wait_for(1) == pytest.approx(2.0)


def test_usage_settles_the_reservation():
    clock = _Clock()
    config = ModelConfig(model="m", prompt="{x}", tokens_per_minute=60 * 1000 / LIMIT_SHARE)
    pacing = ModelPacing(config, partitions=1, clock=clock)
    bucket = pacing.bucket
    admitted = _admitted(pacing)  # reserves prompt estimate + 256 completion tokens
    bucket.take(admitted.tokens)
    level_after_reserve = bucket.wait_for(1000)
    pacing.settle(admitted, _reply(200, {}, usage=(5, 5)), RateController(None))
    assert bucket.wait_for(1000) < level_after_reserve  # unused tokens came back
    assert pacing.counters == {"prompt_tokens": 5, "completion_tokens": 5}


def test_a_refused_call_gives_its_whole_reservation_back():
    config = ModelConfig(model="m", prompt="{x}", tokens_per_minute=60000 / LIMIT_SHARE)
    pacing = ModelPacing(config, partitions=1, clock=_Clock())
    bucket = pacing.bucket
    admitted = _admitted(pacing)
    before = bucket.wait_for(admitted.tokens)
    bucket.take(admitted.tokens)
    assert bucket.wait_for(admitted.tokens) > before
    pacing.settle(admitted, _reply(429, {}), RateController(None))
    assert bucket.wait_for(admitted.tokens) == pytest.approx(before)
    assert pacing.counters == {"prompt_tokens": 0, "completion_tokens": 0}


def test_a_call_sent_before_any_limit_was_known_gives_nothing_back_to_the_bucket():
    import asyncio

    config = ModelConfig(model="m", prompt="{x}", limits_window_s=6.0)
    pacing = ModelPacing(config, partitions=1, clock=_Clock())
    early, answered = (asyncio.run(pacing.admit('{"x": "y"}')) for _ in range(2))
    assert not early.paced  # no bucket yet: nothing taken
    headers = {"x-ratelimit-limit-tokens": "3000"}
    pacing.settle(answered, _reply(200, headers, usage=(5, 5)), RateController(None))
    level = pacing.bucket.wait_for(pacing.bucket.burst)
    pacing.settle(early, _reply(200, headers, usage=(5, 5)), RateController(None))
    assert pacing.bucket.wait_for(pacing.bucket.burst) == level  # no tokens from nowhere


def test_what_is_left_of_the_window_is_spendable_before_its_reset_less_what_is_in_flight():
    clock = _Clock()
    config = ModelConfig(model="m", prompt="{x}", tokens_per_minute=6000, limits_window_s=60.0)
    pacing = ModelPacing(config, partitions=2, clock=clock)
    bucket = pacing.bucket
    answered, in_flight = _admit_each(pacing, "answered", "still out")
    answered.sent_at = clock.now - 1.0
    headers = {"x-ratelimit-remaining-tokens": "5000", "x-ratelimit-reset-tokens": "10s"}
    pacing.settle(answered, _reply(200, headers), RateController(None))
    # this partition's share, less its call in flight and what the rate releases by the reset
    credit = 5000 * LIMIT_SHARE / 2 - in_flight.tokens - bucket.per_second * 10
    assert bucket.credit == pytest.approx(credit)
    assert bucket.wait_for(credit) == 0  # spendable now, beyond the rate
    bucket.take(credit)
    assert bucket.credit == pytest.approx(0)
    pacing.settle(answered, _reply(200, headers), RateController(None))  # a fresh count
    assert bucket.credit > 0
    clock.now += 8.0 - 1e-6
    assert bucket.credit > 0
    clock.now += 2e-6  # the reset less a round trip (sent 1 s before it was answered)
    assert bucket.credit == 0


def test_a_window_nearly_spent_or_unstated_grants_no_credit():
    clock = _Clock()
    config = ModelConfig(model="m", prompt="{x}", tokens_per_minute=6000, limits_window_s=60.0)
    pacing = ModelPacing(config, partitions=1, clock=clock)
    answered = dataclasses.replace(_admitted(pacing), sent_at=clock.now - 0.1)
    for headers in (
        {"x-ratelimit-remaining-tokens": "900", "x-ratelimit-reset-tokens": "10s"},
        {"x-ratelimit-remaining-tokens": "-1", "x-ratelimit-reset-tokens": "-1"},
        {"x-ratelimit-remaining-tokens": "5000"},
        {"x-ratelimit-remaining-tokens": "100", "x-ratelimit-reset-tokens": "0.5s"},  # paused
    ):
        pacing.settle(answered, _reply(200, headers), RateController(None))
        assert pacing.bucket.credit == 0, headers


def test_the_credit_holds_back_calls_admitted_after_the_answered_one_even_if_answered_first():
    clock = _Clock()
    config = ModelConfig(model="m", prompt="{x}", tokens_per_minute=6000, limits_window_s=60.0)
    pacing = ModelPacing(config, partitions=1, clock=clock)
    bucket = pacing.bucket
    slow, overtook, out = _admit_each(pacing, "slow", "overtook", "out")
    headers = {"x-ratelimit-remaining-tokens": "5000", "x-ratelimit-reset-tokens": "10s"}
    pacing.settle(overtook, _reply(200, headers), RateController(None))  # answered first
    share = 5000 * LIMIT_SHARE - bucket.per_second * 10 - max(0.0, bucket.level)
    pacing.settle(slow, _reply(200, headers), RateController(None))  # counted before both
    assert bucket.credit == pytest.approx(share - overtook.tokens - out.tokens)


@pytest.mark.parametrize("remaining", [0, 50, 900, 2000, 5000, 6000])
def test_the_credit_never_exceeds_the_partitions_share_of_what_is_left_of_the_window(remaining):
    clock = _Clock()
    config = ModelConfig(model="m", prompt="{x}", tokens_per_minute=6000, limits_window_s=60.0)
    pacing = ModelPacing(config, partitions=2, clock=clock)
    answered = dataclasses.replace(_admitted(pacing), sent_at=clock.now)
    for reset in ("0.1s", "1s", "30s"):
        headers = {
            "x-ratelimit-remaining-tokens": str(remaining),
            "x-ratelimit-reset-tokens": reset,
        }
        pacing.settle(answered, _reply(200, headers), RateController(None))
        assert 0 <= pacing.bucket.credit <= remaining * LIMIT_SHARE / 2


def test_the_bucket_pays_before_the_credit_so_it_saves_no_burst_for_the_next_window():
    clock = _Clock()
    config = ModelConfig(model="m", prompt="{x}", tokens_per_minute=6000, limits_window_s=60.0)
    bucket = ModelPacing(config, partitions=1, clock=clock).bucket
    bucket.grant(1000, until=clock.now + 10)
    clock.now += 1.0  # the bucket is full: a second of the rate
    bucket.take(30)
    assert bucket.credit == 1000 and bucket.level == pytest.approx(bucket.burst - 30)
    bucket.take(bucket.level)  # the bucket spent: the credit pays beyond it
    bucket.take(30)
    assert bucket.credit == 970 and bucket.level == pytest.approx(0)


def test_a_call_the_credit_paid_gives_nothing_back_to_the_level():
    clock = _Clock()
    config = ModelConfig(model="m", prompt="{x}", tokens_per_minute=6000, limits_window_s=60.0)
    pacing = ModelPacing(config, partitions=1, clock=clock)
    bucket = pacing.bucket
    bucket.grant(1000, until=clock.now + 10)
    paid = asyncio.run(pacing.admit(json.dumps({"x": "y"})))  # an empty bucket: the credit
    assert not paid.paced and bucket.credit == pytest.approx(1000 - paid.tokens)
    pacing.settle(paid, _reply(200, {}, usage=(1, 1)), RateController(None))
    assert bucket.level == pytest.approx(0)  # its unused reservation is not the rate's


def test_the_credit_is_granted_in_the_first_window_only():
    clock = _Clock()
    config = ModelConfig(model="m", prompt="{x}", tokens_per_minute=6000, limits_window_s=6.0)
    pacing = ModelPacing(config, partitions=1, clock=clock)
    headers = {"x-ratelimit-remaining-tokens": "5000", "x-ratelimit-reset-tokens": "3s"}
    first = dataclasses.replace(_admitted(pacing), sent_at=clock.now)
    pacing.settle(first, _reply(200, headers), RateController(None))
    assert pacing.bucket.credit > 0
    clock.now += 3.0  # the next window: the rate alone
    headers["x-ratelimit-reset-tokens"] = "5.9s"
    later = dataclasses.replace(_admitted(pacing), sent_at=clock.now)
    pacing.settle(later, _reply(200, headers), RateController(None))
    assert pacing.bucket.credit == 0


def test_a_paused_bucket_saves_nothing_up_for_the_next_window():
    clock = _Clock()
    config = ModelConfig(model="m", prompt="{x}", tokens_per_minute=6000, limits_window_s=60.0)
    bucket = ModelPacing(config, partitions=1, clock=clock).bucket
    bucket.pause(clock.now + 5.0)
    clock.now += 5.0
    assert bucket.level == pytest.approx(0)  # it resumes empty, paced from the reset
    clock.now += 0.5
    assert bucket.level == pytest.approx(bucket.per_second * 0.5)


def test_the_reservation_learns_what_the_provider_counts_of_the_estimated_prompt():
    config = ModelConfig(model="m", prompt="{x}", tokens_per_minute=6000, limits_window_s=60.0)
    pacing = ModelPacing(config, partitions=1, clock=_Clock())
    body = json.dumps({"messages": [{"role": "user", "content": "word " * 100}]})
    pacing.bucket.give(1e9)  # the clock stands still: room for every call
    first = asyncio.run(pacing.admit(body))
    for _ in range(60):  # the provider counts a quarter of the estimate
        pacing.bucket.give(1e9)
        call = asyncio.run(pacing.admit(body))
        pacing.settle(call, _reply(200, {}, usage=(call.prompt // 4, 20)), RateController(None))
    pacing.bucket.give(1e9)
    later = asyncio.run(pacing.admit(body))
    assert later.prompt == first.prompt  # the estimate itself (and its cost) stays
    assert later.tokens - 20 == pytest.approx(first.prompt / 4, rel=0.05)


def test_a_window_the_calls_already_sent_will_spend_pauses_the_bucket_until_its_reset():
    clock = _Clock()
    config = ModelConfig(model="m", prompt="{x}", tokens_per_minute=6000, limits_window_s=60.0)
    pacing = ModelPacing(config, partitions=1, clock=clock)
    calls = []
    for text in ("answered", "out", "out too"):
        pacing.bucket.give(1e9)
        calls.append(asyncio.run(pacing.admit(json.dumps({"x": text}))))
    answered = calls[0]
    left = answered.tokens + calls[1].tokens + calls[2].tokens - 1  # not room for all three
    headers = {"x-ratelimit-remaining-tokens": str(left), "x-ratelimit-reset-tokens": "2s"}
    pacing.settle(answered, _reply(200, headers), RateController(None))
    assert pacing.bucket.paused_until == pytest.approx(102.0)


def _admit_each(pacing, *texts):
    """One admitted call per text, each with a full bucket: room for the call."""
    calls = []
    for text in texts:
        pacing.bucket.give(1e9)
        calls.append(asyncio.run(pacing.admit(json.dumps({"x": text}))))
    return calls


def _admitted(pacing):
    from spark_jobs.enrichers.model_endpoint.pacing import Admission

    return Admission(tokens=10 + pacing.config.completion_reserve, prompt=10, cost_units=0)


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
