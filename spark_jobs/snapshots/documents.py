"""Stored JSON documents: bounded parsing, and the sha256 that seals each one.

Manifests (format 1), commit headers (format 2), job and completion records are JSON that a
run wrote and that anyone with write access could have crafted. Every reader goes through
:func:`parse_stored_json`; sealed documents carry the sha256 of their own canonical body,
so a torn write, a bit flip or a truncated upload is detected and the reader falls back.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

CHECKSUM_KEY = "manifest_sha256"
_SHA256_HEX_LENGTH = 64

#: Larger stored JSON is refused unread: a manifest holds small integers and the values of
#: at most a queue's worth of pending records.
MAX_DOCUMENT_BYTES = 64 * 2**20


class ManifestError(ValueError):
    """A stored manifest, or a segment it references, is unreadable, inconsistent or corrupt."""


class NewerFormatError(ManifestError):
    """Written by a newer version of this package (rolling upgrade).

    Not corruption: readers skip such manifests, but cleanup must not delete anything,
    since it cannot tell which files they reference.
    """


def parse_stored_json(data: bytes, what: str) -> Any:
    """JSON a run wrote and anyone with write access could have crafted: too large, NaN or
    Infinity, an integer beyond Python's digit limit or nesting deep enough to exhaust the
    stack all raise :class:`ManifestError`, which readers treat as corrupt."""
    if len(data) > MAX_DOCUMENT_BYTES:
        raise ManifestError(f"{what} is {len(data)} bytes, over {MAX_DOCUMENT_BYTES}")
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_no_constants)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ManifestError(f"{what} is not valid JSON ({type(exc).__name__}: {exc})") from None


def read_document(fs: Any, path: str, what: str, limit: int = MAX_DOCUMENT_BYTES) -> Any:
    """The stored JSON at ``path`` (an fsspec filesystem's), read with a bound: at most
    ``limit + 1`` bytes are fetched, and more than ``limit`` is refused as corrupt.
    FileNotFoundError passes through."""
    data: bytes = fs.cat_file(path, start=0, end=limit + 1)
    if len(data) > limit:
        raise ManifestError(f"{what} is over {limit} bytes")
    return parse_stored_json(data, what)


def _no_constants(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def is_sha256_hex(value: object) -> bool:
    return (
        isinstance(value, str)
        and len(value) == _SHA256_HEX_LENGTH
        and all(c in "0123456789abcdef" for c in value)
    )


def canonical(body: Mapping[str, Any]) -> str:
    """Deterministic JSON so the checksum survives a load/dump round trip."""
    return json.dumps(
        body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    )


def seal(body: Mapping[str, Any]) -> bytes:
    """``body`` as canonical JSON with its own sha256 embedded; raises TypeError when a
    value (pending entries, stats) is not JSON."""
    try:
        checksum = hashlib.sha256(canonical(body).encode("ascii")).hexdigest()
    except (TypeError, ValueError) as exc:
        raise TypeError(f"manifest pending/stats must be JSON-serialisable: {exc}") from exc
    return (canonical({**body, CHECKSUM_KEY: checksum}) + "\n").encode("ascii")


def unseal(data: bytes, what: str, version: int) -> dict[str, Any]:
    """Parse a sealed document of format ``version`` and verify its checksum; returns the
    body without the checksum. A newer format raises :class:`NewerFormatError` before the
    checksum is checked (a newer format may checksum differently)."""
    document = parse_stored_json(data, what)
    if not isinstance(document, dict):
        raise ManifestError("not a JSON object")
    found = document.get("format_version")
    if isinstance(found, int) and not isinstance(found, bool) and found > version:
        raise NewerFormatError(f"format_version {found} is newer than {version}")
    stored = document.pop(CHECKSUM_KEY, None)
    if not is_sha256_hex(stored):
        raise ManifestError(f"missing or malformed {CHECKSUM_KEY}")
    try:
        actual = hashlib.sha256(canonical(document).encode("ascii")).hexdigest()
    except (ValueError, RecursionError) as exc:
        raise ManifestError(f"cannot checksum ({type(exc).__name__})") from None
    if actual != stored:
        raise ManifestError(f"checksum mismatch (stored {stored}, computed {actual})")
    if found != version:
        raise ManifestError(f"unsupported format_version {found!r}")
    return document
