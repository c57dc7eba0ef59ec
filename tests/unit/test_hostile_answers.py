"""Property: whatever an answer holds (nesting to past the parser's depth, the wrong type
at any level, integers of hundreds of digits, NaN and infinities, lone surrogates),
reading it gives an output its columns hold (Arrow converts it, as the partition's next
batch will) or a dead letter of a documented class: never ``AttributeError``,
``RecursionError``, ``OverflowError`` or a batch that fails the task."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_jobs.driver.spark_io import ARROW_TYPES
from spark_jobs.enrichers import InvalidResponseError, ResponseField
from spark_jobs.enrichers.calls import FieldMapping
from spark_jobs.enrichers.json_paths import FIELD_TYPES
from spark_jobs.enrichers.model_endpoint import (
    ContentFilteredError,
    InvalidOutputError,
    ModelAnswers,
    ModelConfig,
    RefusedError,
)

#: The dead-letter classes docs/model-endpoints.md and docs/reliability.md name for answers.
DOCUMENTED = (InvalidResponseError, InvalidOutputError, RefusedError, ContentFilteredError)
HOLE = "__hole__"
SCHEMA = {
    "type": "object",
    "properties": {
        "n": {"type": "integer"},
        "score": {"type": ["number", "null"]},
        "label": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "source": {"type": "object", "properties": {"rank": {"type": "integer"}}},
    },
    "required": ["n", "label"],
}
CONFIGS = {
    "structured": ModelConfig(model="m", prompt="{x}", output_schema=SCHEMA),
    "text": ModelConfig(model="m", prompt="{x}"),
    "anthropic": ModelConfig(
        model="c", prompt="{x}", api="anthropic", parameters={"max_tokens": 9}
    ),
    "embeddings": ModelConfig(model="e", prompt="{x}", api="embeddings"),
}

surrogates = st.builds(
    "{}{}{}".format,
    st.text(max_size=3),
    st.sampled_from(["\ud800", "\udbff", "\udc00"]),
    st.text(max_size=3),
)
huge = st.sampled_from([2**63 - 1, 2**63, -(2**63) - 1, 10**19, 10**30, 10**400, -(10**400)])
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    huge,
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([3.5e38, 1e308, -1e300]),
    st.text(max_size=8),
    surrogates,
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=4) | surrogates, inner, max_size=3)
    ),
    max_leaves=8,
)


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


#: Raw JSON text put in a hole: any value, or nesting around the parser's depth limit
#: (parsed; parsed and then too deep to write again; too deep to parse).
raw_values = values.map(json.dumps) | st.integers(min_value=1, max_value=3000).map(deep)


def with_hole(document: Any, path: tuple[Any, ...]) -> Any:
    """``document`` with the node at ``path`` replaced by the hole's marker."""
    if not path:
        return HOLE
    copy = json.loads(json.dumps(document))
    node = copy
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = HOLE
    return copy


def chat(content: str) -> dict[str, Any]:
    message = {"role": "assistant", "content": content, "refusal": None}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return {"choices": [choice], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}


ANSWERS = {
    "structured": chat('{"n": 1, "label": "x"}'),
    "text": chat("hello"),
    "anthropic": {
        "content": [{"type": "text", "text": "hi"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 1},
    },
    "embeddings": {"data": [{"embedding": [0.5, -1.0]}], "usage": {"prompt_tokens": 2}},
}


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every node's path in ``node``, the root's included: a hole may be at each level."""
    found = [prefix]
    children = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else ()
    )
    for key, child in children:
        found += paths(child, (*prefix, key))
    return found


def read(kind: str, payload: bytes) -> None:
    """The answer read as the enricher reads it: its output must fit its columns, or its
    failure be of a documented class."""
    config = CONFIGS[kind]
    try:
        output = ModelAnswers(config)(payload, "here", str)
    except Exception as error:
        assert type(error) in DOCUMENTED, f"{type(error).__name__}: {str(error)[:300]}"
        return
    pa.RecordBatch.from_pylist([output], schema=pa.schema(list(config.output_types().items())))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(ANSWERS)), st.data(), raw_values)
def test_a_model_answer_of_any_shape_fits_its_columns_or_is_a_documented_dead_letter(
    kind, data, raw
):
    answer = ANSWERS[kind]
    path = data.draw(st.sampled_from(paths(answer)))
    payload = json.dumps(with_hole(answer, path)).replace(json.dumps(HOLE), raw)
    read(kind, payload.encode())


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["structured", "text"]),
    st.fixed_dictionaries({}, optional={name: raw_values for name in SCHEMA["properties"]}),
    raw_values,
)
def test_a_model_s_text_of_any_values_fits_its_columns_or_is_a_documented_dead_letter(
    kind, properties, raw
):
    """The text the model wrote: an object of the schema's names, or any JSON at all."""
    text = "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in properties.items()) + "}"
    for content in (text, raw):
        read(kind, json.dumps(chat(content)).encode())


@settings(max_examples=300, deadline=None)
@given(
    st.fixed_dictionaries({key: st.sampled_from(FIELD_TYPES) for key in "abc"}),
    st.dictionaries(st.sampled_from(["a", "b", "c"]), values, max_size=3) | values,
)
def test_a_response_field_of_any_value_fits_its_column_or_is_an_invalid_response(types, document):
    """The HTTP enricher's fields (and a user function's) of each type, out of any JSON."""
    fields = {key: ResponseField(f"$.{key}", kind) for key, kind in types.items()}
    try:
        output = FieldMapping(fields, str).output(document, "here")
    except InvalidResponseError:
        return
    schema = pa.schema([(name, ARROW_TYPES[field.type]) for name, field in fields.items()])
    pa.RecordBatch.from_pylist([output], schema=schema)
