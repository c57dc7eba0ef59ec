"""One output field of an enrichment: a JSON path into the answer and the type it
converts to (``ResponseField``), parsed from the shapes a spec file or flag may use."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .json_paths import FIELD_TYPES, compile_path


@dataclass(frozen=True)
class ResponseField:
    """One output field: a JSON path into the response and the type to convert to."""

    path: str
    type: str = "string"

    def __post_init__(self) -> None:
        if self.type not in FIELD_TYPES:
            raise ValueError(f"type must be one of {', '.join(FIELD_TYPES)}, got {self.type!r}")
        compile_path(self.path)

    @classmethod
    def parse(cls, value: Any) -> ResponseField:
        """From ``"$.path"``, ``["$.path", "type"]`` or ``{"path": ..., "type": ...}``."""
        if isinstance(value, ResponseField):
            return value
        if isinstance(value, str):
            return cls(value)
        if isinstance(value, list | tuple) and len(value) == 2:
            return cls(*value)
        if isinstance(value, Mapping) and set(value) <= {"path", "type"} and "path" in value:
            return cls(**value)
        raise ValueError(
            f'expected "$.path", ["$.path", "type"] or {{"path": ..., "type": ...}}, got {value!r}'
        )


def check_response_fields(fields: Any) -> dict[str, ResponseField]:
    if not isinstance(fields, Mapping) or not fields:
        raise ValueError("response_fields must map at least one output name to a JSON path")
    parsed = {}
    for name, spec in fields.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"response_fields: output names must be strings, got {name!r}")
        try:
            parsed[name] = ResponseField.parse(spec)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"response_fields.{name}: {exc}") from None
    return parsed
