"""Checks shared by the enricher's config classes; each ValueError names the field."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

IDENTITY = {"fingerprint": True}
"""``field(metadata=IDENTITY)``: the field changes what the enrichment computes, so it is
part of the fingerprint a resumed run compares. Unmarked fields are where a secret comes
from, or tuning (how fast, how many at once, how long to wait): a resumed run may change
them."""


def check_str(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    return value


def check_choice(value: Any, choices: tuple[str, ...], name: str) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")


def check_int(value: Any, name: str, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def positive_float(value: Any, name: str) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def check_base_url(template: str, name: str) -> None:
    """Scheme and host must be literal: one config, one upstream, one connection pool."""
    head = template.split("{", 1)[0]
    parts = urlsplit(head)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{name} must start with http:// or https:// and a host, got {template!r}")
    try:
        parts.port  # noqa: B018 - parsing the port is the check
    except ValueError:
        raise ValueError(f"{name} has an invalid port, got {template!r}") from None
    if "{" in template and not parts.path:
        raise ValueError(f"{name}: the host must not contain placeholders, got {template!r}")


def check_headers(headers: Any) -> dict[str, str]:
    if not isinstance(headers, Mapping):
        raise ValueError(f"headers must be a mapping of strings, got {headers!r}")
    for name, value in headers.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise ValueError(f"headers must map strings to strings, got {name!r}: {value!r}")
        if any(c in name + value for c in "\r\n") or not name:
            raise ValueError(f"headers: {name!r} has an empty name or a line break")
        if name.lower() in ("authorization", "proxy-authorization"):
            raise ValueError(
                f"headers: {name} must not be set here (the config is not secret); "
                "use token_env or token_file"
            )
    return dict(headers)


def check_secret_headers(secret_headers: Any, headers: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(secret_headers, Mapping):
        raise ValueError(
            f"secret_headers must map header names to variables, got {secret_headers!r}"
        )
    for name, variable in secret_headers.items():
        if not isinstance(name, str) or not name or any(c in name for c in "\r\n:"):
            raise ValueError(f"secret_headers: {name!r} is not a header name")
        if name.lower() in {h.lower() for h in headers} or name.lower() == "authorization":
            raise ValueError(f"secret_headers: {name} is also set elsewhere (headers or token)")
        check_str(variable, f"secret_headers.{name}")
    return dict(secret_headers)
