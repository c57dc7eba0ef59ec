"""A structured-output JSON schema as typed columns: the Arrow type of each property, and
the check that an answer fits it.

The subset is what a column can hold: ``object`` (with ``properties``; a struct),
``array`` (with ``items``; a list), ``string`` (``enum`` allowed), ``integer``,
``number``, ``boolean``, and any of them nullable (``"type": ["string", "null"]``).
Anything else (``oneOf``, ``$ref``, a property without a type) is refused when the spec
is read, naming its path, since no column type could hold it. The same schema is sent
to the endpoint (``response_format``), so a model that honours it answers in shape;
:func:`conform` catches the ones that do not.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from ..json_paths import int64_problem, text_problem

_SCALARS: dict[str, pa.DataType] = {
    "string": pa.string(),
    "integer": pa.int64(),
    "number": pa.float64(),
    "boolean": pa.bool_(),
}
_KEYWORDS = {
    "type",
    "properties",
    "required",
    "items",
    "enum",
    "description",
    "title",
    "additionalProperties",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
}


class OutputMismatch(ValueError):
    """An answer that does not fit the schema; the message names the path."""


def _type_of(schema: Any, path: str) -> tuple[str, bool]:
    """(the one non-null type, whether null is allowed)."""
    if not isinstance(schema, Mapping):
        raise ValueError(f"output_schema at {path}: expected a schema object, got {schema!r}")
    unknown = sorted(set(schema) - _KEYWORDS)
    if unknown:
        raise ValueError(f"output_schema at {path}: unsupported keyword(s) {', '.join(unknown)}")
    kind = schema.get("type")
    kinds = list(kind) if isinstance(kind, list) else [kind]
    nullable = "null" in kinds
    kinds = [k for k in kinds if k != "null"]
    if len(kinds) != 1 or kinds[0] not in (*_SCALARS, "object", "array"):
        raise ValueError(
            f"output_schema at {path}: type must be one of object, array, string, integer, "
            f"number, boolean (optionally with null), got {kind!r}"
        )
    return kinds[0], nullable


def arrow_type(schema: Any, path: str = "$") -> pa.DataType:
    """The Arrow type a value of ``schema`` lands in; ValueError naming an unsupported part."""
    kind, _ = _type_of(schema, path)
    if kind == "array":
        return pa.list_(arrow_type(schema.get("items"), f"{path}[]"))
    if kind == "object":
        properties = schema.get("properties")
        if not isinstance(properties, Mapping) or not properties:
            raise ValueError(f"output_schema at {path}: an object needs its properties")
        return pa.struct(
            [pa.field(name, arrow_type(sub, f"{path}.{name}")) for name, sub in properties.items()]
        )
    return _SCALARS[kind]


def columns(schema: Any) -> dict[str, pa.DataType]:
    """The output columns of a top-level object schema: one per property."""
    struct = arrow_type(schema)
    if not pa.types.is_struct(struct):
        raise ValueError("output_schema: the top level must be an object (one column per property)")
    return {field.name: field.type for field in struct}


def conform(value: Any, schema: Mapping[str, Any], path: str = "$") -> Any:
    """``value`` as its column holds it (an integer for ``integer``, every property of an
    object present), or :class:`OutputMismatch` naming the first path that does not fit."""
    kind, nullable = _type_of(schema, path)
    if value is None:
        if nullable:
            return None
        raise OutputMismatch(f"{path}: null where {kind} is required")
    if "enum" in schema and value not in schema["enum"]:
        raise OutputMismatch(f"{path}: {value!r} is not one of {schema['enum']!r}")
    if kind == "object":
        return _conform_object(value, schema, path)
    if kind == "array":
        if not isinstance(value, list):
            raise OutputMismatch(f"{path}: expected an array, got {_kind(value)}")
        items = schema.get("items", {})
        return [conform(item, items, f"{path}[{i}]") for i, item in enumerate(value)]
    return _conform_scalar(value, kind, path)


def _conform_object(value: Any, schema: Mapping[str, Any], path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise OutputMismatch(f"{path}: expected an object, got {_kind(value)}")
    properties = schema["properties"]
    missing = [name for name in schema.get("required", ()) if name not in value]
    if missing:
        raise OutputMismatch(f"{path}: missing required {', '.join(map(repr, missing))}")
    extra = sorted(set(value) - set(properties))
    if extra and schema.get("additionalProperties") is False:
        raise OutputMismatch(f"{path}: unexpected {', '.join(map(repr, extra))}")
    return {
        name: conform(value.get(name), sub, f"{path}.{name}") if name in value else None
        for name, sub in properties.items()
    }


def _conform_scalar(value: Any, kind: str, path: str) -> Any:
    """A scalar as its column holds it: a string UTF-8 can encode, an integer of 64 bits,
    a finite number (JSON has no bound on either; the column does)."""
    if kind == "string" and isinstance(value, str):
        return _fitting(value, text_problem(value), path)
    if kind == "boolean" and isinstance(value, bool):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise OutputMismatch(f"{path}: expected {kind}, got {_kind(value)}")
    if kind == "integer" and (isinstance(value, int) or float(value).is_integer()):
        number = int(value)
        return _fitting(number, int64_problem(number), path)
    if kind == "number" and -sys.float_info.max <= value <= sys.float_info.max:
        return float(value)  # a comparison, unlike float(), cannot overflow; NaN fails it
    raise OutputMismatch(f"{path}: expected {kind}, got {_short(value)}")


def _fitting(value: Any, problem: str | None, path: str) -> Any:
    if problem is not None:
        raise OutputMismatch(f"{path}: {problem}")
    return value


def _short(value: int | float) -> str:
    text = repr(value) if isinstance(value, float) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    return names.get(type(value), f"a {type(value).__name__}")
