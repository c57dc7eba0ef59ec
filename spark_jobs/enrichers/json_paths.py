"""A small JSON path subset for picking output fields out of a response, and their types.

Enrichment maps a few response values onto output columns, so the subset is what such
a mapping needs: ``$`` followed by ``.name``, ``['name']`` / ``["name"]`` and ``[index]``
steps (negative indexes count from the end), e.g. ``$.address.city`` or
``$.items[0].name``. No wildcards or filters: one path gives at most one value.
Paths are compiled once per config, since they are applied to every response.

JSON holds more than a column does: integers of any size, strings with a lone surrogate
(``"\\ud800"``) that UTF-8 cannot encode. Such a value, converted as it is, made the
Arrow conversion of the partition's next output batch fail, and with it the whole task
and every retry of it. So each conversion refuses what its column cannot hold
(:func:`int64_problem`, :func:`text_problem`, also the model endpoint's ``conform``),
and the value is a dead letter of its record alone.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

#: The output types of a response field (a Spark job maps them onto column types).
FIELD_TYPES = ("string", "int", "float", "bool", "json")
#: The integers an ``int`` (``bigint``) column holds.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

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


def int64_problem(value: int) -> str | None:
    """Why a 64-bit column cannot hold the integer ``value``; None if it can."""
    if INT64_MIN <= value <= INT64_MAX:
        return None
    digits = len(str(abs(value)))
    return f"the integer {_short(str(value))} ({digits} digits) is outside the 64-bit range"


def text_problem(text: str) -> str | None:
    """Why a string column cannot hold ``text`` (a lone surrogate, which UTF-8 cannot
    encode); None if it can. ASCII, nearly every value, is one C-speed scan."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        code = ord(text[error.start])
        return f"a string with a lone surrogate U+{code:04X} at character {error.start}"
    return None


def _to_string(value: Any) -> str:
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    raise ConversionError(f"expected a string, got a JSON {_json_kind(value)}")


def _to_int(value: Any) -> int:
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:  # also a string of more than 4 300 digits
            pass
    if number is None:
        raise ConversionError(f"expected an integer, got {_describe(value)}")
    problem = int64_problem(number)
    if problem is not None:
        raise ConversionError(problem)
    return number


def _to_float(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:  # an integer of more than 308 digits
            pass
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
    """Nested data as JSON text: one string column holds any shape (a lone surrogate in
    it, key or value, written as it is, is refused)."""
    try:
        return _text(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
    except RecursionError:  # parsed near the depth limit, written from deeper down
        raise ConversionError("expected JSON, got one nested too deeply to write") from None


def _text(text: str) -> str:
    problem = text_problem(text)
    if problem is not None:
        raise ConversionError(problem)
    return text


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
    return _short(json.dumps(value))


def _short(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."
