"""Finding a secret in text a server sent back, in whatever form it was echoed.

A server quoting a request back rarely quotes it verbatim: a JSON error body escapes it
(``\\"``, ``\\/``, ``\\u00e9``), a redirect or log line URL-encodes it (``%2F`` or ``+``,
either hex case), an echoed ``Authorization: Basic`` or debugging dump base64-encodes it,
and a body cut to a snippet may hold only its start. :func:`redact` replaces every such
form, and any run of at least ``PREFIX_CHARS`` leading characters of one, by ``***``.
"""

from __future__ import annotations

import base64
import json
import re
from urllib.parse import quote, quote_plus

HIDDEN = "***"
PREFIX_CHARS = 6
"""A secret's start this long or longer counts as the secret (a snippet cut through it,
a server echoing part of it); shorter starts are too common in ordinary text."""
_HEX_ESCAPE = re.compile(r"%[0-9A-F]{2}")


def encoded_forms(value: str) -> tuple[str, ...]:
    """``value`` as sent and as a server may echo it, longest first."""
    escaped = [json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]]
    escaped += [form.replace("/", "\\/") for form in escaped]
    encoded = [quote(value, safe=""), quote(value), quote_plus(value), quote_plus(value, "/")]
    encoded += [_HEX_ESCAPE.sub(lambda m: m[0].lower(), form) for form in encoded]
    raw = value.encode()
    b64 = [base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()]
    b64 += [form.rstrip("=") for form in b64]
    return tuple(sorted({value, *escaped, *encoded, *b64}, key=len, reverse=True))


def redact(text: str, forms: tuple[str, ...]) -> str:
    """``text`` with each of ``forms``, and each start of one at least ``PREFIX_CHARS``
    long, replaced by ``***``."""
    for form in forms:
        text = _redact_form(text, form)
    return text


def _redact_form(text: str, form: str) -> str:
    head = form[:PREFIX_CHARS]
    start = text.find(head)
    if start < 0:
        return text
    kept: list[str] = []
    done = 0
    while start >= 0:
        end = start + len(head)
        while end < len(text) and end - start < len(form) and text[end] == form[end - start]:
            end += 1
        kept += [text[done:start], HIDDEN]
        done = end
        start = text.find(head, end)
    kept.append(text[done:])
    return "".join(kept)
