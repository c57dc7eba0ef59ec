"""Option values given as text (a flag, a spec file): durations and response fields,
checked so that a bad one raises ``SpecError`` naming the option at fault."""

from __future__ import annotations

import re

from spark_jobs.enrichers.response_field import ResponseField
from spark_jobs.spec.spec_error import SpecError

_DURATION = re.compile(r"^(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[smhd]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str | float) -> float:
    """Seconds from ``90``, ``"90s"``, ``"15m"``, ``"12h"`` or ``"7d"``."""
    match = _DURATION.match(str(text).strip())
    if match is None or float(match["number"]) <= 0:
        raise ValueError(f"expected a positive duration such as 3600, 15m, 12h or 7d, got {text!r}")
    return float(match["number"]) * _UNIT_S[match["unit"]]


def check(ok: bool, option: str, message: str) -> None:
    if not ok:
        raise SpecError(f"--{option.replace('_', '-')}: {message}")


_FIELD = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<path>\$[^:]*)(?::(?P<type>\w+))?$")


def parse_response_field(text: str) -> tuple[str, ResponseField]:
    """``NAME=JSONPATH[:TYPE]``, e.g. ``city=$.address.city`` or ``score=$.score:float``."""
    match = _FIELD.match(text)
    if not match:
        raise SpecError(
            "--response-field: expected NAME=JSONPATH[:TYPE] (e.g. score=$.score:float), "
            f"got {text!r}"
        )
    try:
        return match["name"], ResponseField(match["path"], match["type"] or "string")
    except ValueError as error:
        raise SpecError(f"--response-field {text!r}: {error}") from None


def parse_error_classes(text: str) -> list[str] | None:
    """``--retry-dead-letters``: ``all`` (None) or error class names, comma-separated."""
    if text.strip() == "all":
        return None
    classes = [c.strip() for c in text.split(",") if c.strip()]
    if not classes or not all(c.isidentifier() for c in classes):
        raise SpecError(
            "--retry-dead-letters: expected all or error classes such as "
            f"ThrottledError,ServerError, got {text!r}"
        )
    return classes
