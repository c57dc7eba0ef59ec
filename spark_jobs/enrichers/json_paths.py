"""A small JSON path subset for picking output fields out of a response, and their types.

Enrichment maps a few response values onto output columns, so the subset is what such
a mapping needs: ``$`` followed by ``.name``, ``['name']`` / ``["name"]`` and ``[index]``
steps (negative indexes count from the end), e.g. ``$.address.city`` or
``$.items[0].name``. No wildcards or filters: one path gives at most one value.
Paths are compiled once per config, since they are applied to every response.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

#: The output types of a response field (a Spark job maps them onto column types).
FIELD_TYPES = ("string", "int", "float", "bool", "json")

_STEP = re.compile(
    r"""
    \.(?P<name>[A-Za-z_][A-Za-z0-9_\-]*)       # .name
    | \[(?P<index>-?\d+)\]                     # [0]
    | \['(?P<single>(?:[^'\\]|\\.)*)'\]        # ['any key']
    | \["(?P<double>(?:[^"\\]|\\.)*)"\]        # ["any key"]
    """,
    re.VERBOSE,
)


class JsonPathError(ValueError):
    """A path outside the supported subset."""


class ConversionError(ValueError):
    """A response value that does not fit its declared type."""


Step = str | int


def compile_path(path: str) -> tuple[Step, ...]:
    """The steps of ``path``: str keys and int indexes; raises JsonPathError."""
    if not isinstance(path, str) or not path.startswith("$"):
        raise JsonPathError(f"a JSON path must start with '$', got {path!r}")
    steps: list[Step] = []
    position = 1
    while position < len(path):
        match = _STEP.match(path, position)
        if match is None:
            raise JsonPathError(
                f"unsupported JSON path {path!r} at position {position}: expected "
                ".name, [index], ['key'] or [\"key\"]"
            )
        if match["name"] is not None:
            steps.append(match["name"])
        elif match["index"] is not None:
            steps.append(int(match["index"]))
        else:
            quoted = match["single"] if match["single"] is not None else match["double"]
            steps.append(re.sub(r"\\(.)", r"\1", quoted))
        position = match.end()
    return tuple(steps)


def extract(document: Any, steps: tuple[Step, ...]) -> Any:
    """The value at ``steps`` in ``document``, or None when any step does not exist.

    Runs for every output field of every response, hence subscripting and catching the
    misses rather than checking types first. JSON objects only have string keys and
    JSON strings reject string subscripts, so only an index needs its list checked.
    """
    value = document
    try:
        for step in steps:
            if step.__class__ is int and value.__class__ is not list:
                return None
            value = value[step]
    except (KeyError, IndexError, TypeError):
        return None
    return value


def _to_string(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    raise ConversionError(f"expected a string, got a JSON {_json_kind(value)}")


def _to_int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ConversionError(f"expected an integer, got {_describe(value)}")


def _to_float(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            pass
        else:
            if math.isfinite(number):
                return number
    raise ConversionError(f"expected a number, got {_describe(value)}")


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ConversionError(f"expected a boolean, got {_describe(value)}")


def _to_json(value: Any) -> str:
    """Nested data as JSON text: one string column holds any shape."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "string": _to_string,
    "int": _to_int,
    "float": _to_float,
    "bool": _to_bool,
    "json": _to_json,
}


_JSON_KINDS: dict[type, str] = {dict: "object", list: "array"}


def _json_kind(value: Any) -> str:
    return _JSON_KINDS.get(type(value), type(value).__name__)


def _describe(value: Any) -> str:
    if isinstance(value, dict | list):
        return f"a JSON {_json_kind(value)}"
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
