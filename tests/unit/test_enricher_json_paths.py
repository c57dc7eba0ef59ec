"""The JSON path subset and the output type conversions."""

import json

import pytest

from spark_jobs.enrichers.json_paths import (
    CONVERTERS,
    ConversionError,
    JsonPathError,
    compile_path,
    extract,
)

DOC = {
    "address": {"city": "Berlin", "zip": None},
    "items": [{"name": "first"}, {"name": "second"}],
    "odd key": {"it's": 1},
    "n": 3,
}


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("$", DOC),
        ("$.address.city", "Berlin"),
        ("$.items[0].name", "first"),
        ("$.items[-1].name", "second"),
        ("$['odd key']['it\\'s']", 1),
        ('$["odd key"]', {"it's": 1}),
        ("$.address.zip", None),
        ("$.address.street", None),
        ("$.items[2].name", None),
        ("$.items.name", None),
        ("$.n[0]", None),
        ("$.n.x", None),
    ],
)
def test_extract(path, value):
    assert extract(DOC, compile_path(path)) == value


@pytest.mark.parametrize("path", ["address.city", "$.", "$..a", "$.a[*]", "$.a[?(@.x)]", "$[a]"])
def test_unsupported_paths(path):
    with pytest.raises(JsonPathError):
        compile_path(path)


@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [
        ("string", "x", "x"),
        ("string", 12, "12"),
        ("string", 1.5, "1.5"),
        ("string", True, "true"),
        ("int", 12, 12),
        ("int", 12.0, 12),
        ("int", " 12 ", 12),
        ("float", 2, 2.0),
        ("float", "2.5", 2.5),
        ("bool", False, False),
        ("bool", "TRUE", True),
        ("json", {"b": [1, "é"]}, '{"b":[1,"é"]}'),
        ("json", "text", '"text"'),
    ],
)
def test_conversions(kind, value, expected):
    converted = CONVERTERS[kind](value)
    assert converted == expected and type(converted) is type(expected)


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("string", {"a": 1}),
        ("string", [1]),
        ("int", 1.5),
        ("int", True),
        ("int", "twelve"),
        ("float", "nan"),
        ("float", False),
        ("bool", 1),
        ("bool", "yes"),
    ],
)
def test_conversion_errors(kind, value):
    with pytest.raises(ConversionError, match="expected"):
        CONVERTERS[kind](value)


def test_conversion_error_text_is_short():
    with pytest.raises(ConversionError) as caught:
        CONVERTERS["int"]("x" * 500)
    assert len(str(caught.value)) < 80
    assert json.dumps("x" * 10)[:5] in str(caught.value)
