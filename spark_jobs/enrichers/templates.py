"""URL and body templates: ``{field}`` placeholders filled from the record.

Templates use ``str.format`` syntax (``{{``/``}}`` for literal braces) restricted to
plain field names, and are compiled once into literal/field pieces because they are
filled for every record. URL values are percent-encoded (``/``, ``?``, ``#`` too), so a
record value can never change the path or add a query parameter. In a body template a
string that is exactly one placeholder takes the raw value with its JSON type (an int
stays an int, a null stays ``null``); placeholders inside longer strings are replaced by
the value's text, written as JSON writes it for null and booleans (``null``, ``true``).

``{field!s}`` asks for the value's text wherever it stands, alone too, and only a scalar
has one: a list, struct, map or bytes value there is a :class:`FieldValueError` (a
model's prompt is written so, ``model_endpoint/requests.py``: a list column would
otherwise become content blocks of the model's API, images or files among them). A NaN
or an infinity that a lone placeholder would put into the body is one too: JSON has no
spelling for it, and a bare ``NaN`` on the wire is a body no strict server reads.
"""

from __future__ import annotations

import json
import math
import string
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from .errors import FieldValueError, MissingFieldError

_FORMATTER = string.Formatter()


class TemplateError(ValueError):
    """A template that is not plain ``{field}`` placeholders and literal text."""


Piece = tuple[str, str | None, bool]
"""Literal text, then the field after it (or None), and whether that field is wanted as
text (``{field!s}``)."""
#: What has no text of its own to put into a string: an Arrow list, struct, map, binary.
_NO_TEXT = (list, tuple, dict, bytes, bytearray)


def parse_template(template: str, what: str) -> tuple[Piece, ...]:
    """The pieces of ``template``; ``what`` names the config field in errors."""
    try:
        parsed = list(_FORMATTER.parse(template))
    except ValueError as exc:
        raise TemplateError(f"{what}: {exc} in {template!r}") from None
    pieces: list[Piece] = []
    for literal, field, spec, conversion in parsed:
        if field is not None:
            if not field.isidentifier():
                raise TemplateError(
                    f"{what}: placeholder {{{field}}} must be a record field name in {template!r}"
                )
            if spec or conversion not in (None, "s"):
                raise TemplateError(
                    f"{what}: placeholder {{{field}}} must not have a format spec or a "
                    "conversion other than !s"
                )
        pieces.append((literal, field, conversion == "s"))
    return tuple(pieces)


def fields_of(pieces: tuple[Piece, ...]) -> list[str]:
    return [field for _, field, _ in pieces if field is not None]


class FieldSource:
    """Where record fields are read for (a config field such as ``url_template``) and
    which record field identifies a record: both go into the missing-field message."""

    __slots__ = ("key_field", "what")

    def __init__(self, what: str, key_field: str | None) -> None:
        self.what = what
        self.key_field = key_field

    def value(self, record: Mapping[str, Any], field: str) -> Any:
        try:
            return record[field]
        except (KeyError, TypeError):
            raise MissingFieldError(describe_missing(record, field, self)) from None

    def text(self, record: Mapping[str, Any], field: str) -> str:
        """The field's value as text (``{field!s}``): a scalar's, never a list's or a map's."""
        value = self.value(record, field)
        if isinstance(value, _NO_TEXT):
            raise FieldValueError(
                f"{self.what} needs field {field!r} as text, but {self.label(record)} holds "
                f"a {type(value).__name__} there: a list, struct, map or bytes value has "
                "no text to send"
            )
        return _text(value)

    def label(self, record: Mapping[str, Any]) -> str:
        """``record id='k1'`` (its ``key_field``), else ``the record``: never its values."""
        key = record.get(self.key_field) if self.key_field else None
        return f"record {self.key_field}={key!r}" if key is not None else "the record"


def describe_missing(record: Any, field: str, context: FieldSource) -> str:
    """Names the template, the field and the record's key; the record's values stay out."""
    what = context.what
    if not isinstance(record, Mapping):
        return f"{what} needs field {field!r}, but the record is a {type(record).__name__}"
    fields = ", ".join(sorted(map(str, record))) or "none"
    return (
        f"{what} needs field {field!r}, which {context.label(record)} lacks (its fields: {fields})"
    )


#: What may stay as it is in the template's own text: URL structure and existing escapes.
_URL_STRUCTURE = ":/?#[]@!$&'()*+,;=%~"


class UrlTemplate:
    """A compiled URL template; ``fill(record)`` raises MissingFieldError.

    ``fill`` returns the URL fully percent-encoded, to be sent exactly as built (the
    enricher does not let the client normalise it). A record value is data, never URL
    structure: everything but letters, digits, ``-``, ``_`` and ``~`` is encoded, the dot
    included, so a value of ``..`` or ``.`` cannot become a dot segment that moves the
    call (and its bearer token) to another endpoint.
    """

    __slots__ = ("_context", "_pieces")

    def __init__(self, template: str, what: str, key_field: str | None = None) -> None:
        self._context = FieldSource(what, key_field)
        self._pieces = tuple(
            (quote(literal, safe=_URL_STRUCTURE), field, as_text)
            for literal, field, as_text in parse_template(template, what)
        )

    @property
    def fields(self) -> list[str]:
        return fields_of(self._pieces)

    def fill(self, record: Mapping[str, Any]) -> str:
        parts = []
        for literal, field, _ in self._pieces:
            parts.append(literal)
            if field is not None:
                value = self._context.value(record, field)
                text = value if isinstance(value, str) else str(value)
                parts.append(quote(text, safe="").replace(".", "%2E"))
        return "".join(parts)


class BodyTemplate:
    """A compiled JSON body template; ``fill(record)`` returns a new JSON-ready value,
    ``encode(record)`` the body as sent."""

    __slots__ = ("_compiled", "_context", "_typed", "fields")

    def __init__(self, template: Any, what: str, key_field: str | None = None) -> None:
        self._context = FieldSource(what, key_field)
        self.fields: list[str] = []
        self._typed: list[str] = []  # the lone placeholders: the fields whose JSON type is sent
        self._compiled = self._compile(template, what)

    def _compile(self, node: Any, what: str) -> Any:
        if isinstance(node, str):
            pieces = parse_template(node, what)
            fields = fields_of(pieces)
            self.fields.extend(fields)
            if _typed_field(pieces) is not None:
                self._typed.extend(fields)
            # Without placeholders only the "{{"/"}}" escapes need resolving, once.
            return pieces if fields else "".join(literal for literal, _, _ in pieces)
        if isinstance(node, dict):
            return {key: self._compile(value, what) for key, value in node.items()}
        if isinstance(node, list):
            return [self._compile(value, what) for value in node]
        return node

    def fill(self, record: Mapping[str, Any]) -> Any:
        return _fill(self._compiled, record, self._context)

    def encode(self, record: Mapping[str, Any]) -> str:
        """The body as sent, compact JSON; a NaN or an infinity a field would put into it
        is a :class:`FieldValueError` naming the field (JSON has no spelling for them)."""
        try:
            return json.dumps(
                self.fill(record), separators=(",", ":"), default=str, allow_nan=False
            )
        except ValueError:
            named = [f for f in self._typed if _non_finite(record.get(f))]
            raise FieldValueError(
                f"{self._context.what}: field {', '.join(map(repr, named))} of "
                f"{self._context.label(record)} holds NaN or an infinity, which JSON "
                "cannot carry"
            ) from None


def _typed_field(pieces: tuple[Piece, ...]) -> str | None:
    """The field of a string that is one placeholder, not asked as text: its value is sent
    with its JSON type; None for any other string."""
    if len(pieces) == 1:
        literal, field, as_text = pieces[0]
        if literal == "" and not as_text:
            return field
    return None


def _fill(node: Any, record: Mapping[str, Any], context: FieldSource) -> Any:
    if isinstance(node, tuple):  # compiled string pieces
        if len(node) == 1 and node[0][0] == "" and not node[0][2]:  # _typed_field, inline
            return context.value(record, node[0][1])
        parts = []
        for literal, field, as_text in node:
            parts.append(literal)
            if field is not None:
                parts.append(
                    context.text(record, field) if as_text else _text(context.value(record, field))
                )
        return "".join(parts)
    if isinstance(node, dict):
        return {key: _fill(value, record, context) for key, value in node.items()}
    if isinstance(node, list):
        return [_fill(value, record, context) for value in node]
    return node


def _text(value: Any) -> str:
    """A value inside a longer body string: JSON's spelling, not Python's ``None``/``True``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _non_finite(value: Any) -> bool:
    """Whether ``value`` is, or holds, a float JSON cannot write (NaN, an infinity)."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(map(_non_finite, value.values()))
    if isinstance(value, list | tuple):
        return any(map(_non_finite, value))
    return False
