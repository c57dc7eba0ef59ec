"""URL and body templates: ``{field}`` placeholders filled from the record.

Templates use ``str.format`` syntax (``{{``/``}}`` for literal braces) restricted to
plain field names, and are compiled once into literal/field pieces because they are
filled for every record. URL values are percent-encoded (``/``, ``?``, ``#`` too), so a
record value can never change the path or add a query parameter. In a body template a
string that is exactly one placeholder takes the raw value with its JSON type (an int
stays an int, a null stays ``null``); placeholders inside longer strings are replaced by
the value's text, written as JSON writes it for null and booleans (``null``, ``true``).
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from .errors import MissingFieldError

_FORMATTER = string.Formatter()


class TemplateError(ValueError):
    """A template that is not plain ``{field}`` placeholders and literal text."""


Piece = tuple[str, str | None]  # literal text, then the field after it (or None)


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
            if spec or conversion:
                raise TemplateError(
                    f"{what}: placeholder {{{field}}} must not have a format spec or conversion"
                )
        pieces.append((literal, field))
    return tuple(pieces)


def fields_of(pieces: tuple[Piece, ...]) -> list[str]:
    return [field for _, field in pieces if field is not None]


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


def describe_missing(record: Any, field: str, context: FieldSource) -> str:
    """Names the template, the field and the record's key; the record's values stay out."""
    what = context.what
    if not isinstance(record, Mapping):
        return f"{what} needs field {field!r}, but the record is a {type(record).__name__}"
    key_field = context.key_field
    key = record.get(key_field) if key_field else None
    label = f"record {key_field}={key!r}" if key is not None else "the record"
    fields = ", ".join(sorted(map(str, record))) or "none"
    return f"{what} needs field {field!r}, which {label} lacks (its fields: {fields})"


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
            (quote(literal, safe=_URL_STRUCTURE), field)
            for literal, field in parse_template(template, what)
        )

    @property
    def fields(self) -> list[str]:
        return fields_of(self._pieces)

    def fill(self, record: Mapping[str, Any]) -> str:
        parts = []
        for literal, field in self._pieces:
            parts.append(literal)
            if field is not None:
                value = self._context.value(record, field)
                text = value if isinstance(value, str) else str(value)
                parts.append(quote(text, safe="").replace(".", "%2E"))
        return "".join(parts)


class BodyTemplate:
    """A compiled JSON body template; ``fill(record)`` returns a new JSON-ready value."""

    __slots__ = ("_compiled", "_context", "fields")

    def __init__(self, template: Any, what: str, key_field: str | None = None) -> None:
        self._context = FieldSource(what, key_field)
        self.fields: list[str] = []
        self._compiled = self._compile(template, what)

    def _compile(self, node: Any, what: str) -> Any:
        if isinstance(node, str):
            pieces = parse_template(node, what)
            fields = fields_of(pieces)
            self.fields.extend(fields)
            # Without placeholders only the "{{"/"}}" escapes need resolving, once.
            return pieces if fields else "".join(literal for literal, _ in pieces)
        if isinstance(node, dict):
            return {key: self._compile(value, what) for key, value in node.items()}
        if isinstance(node, list):
            return [self._compile(value, what) for value in node]
        return node

    def fill(self, record: Mapping[str, Any]) -> Any:
        return _fill(self._compiled, record, self._context)


def _fill(node: Any, record: Mapping[str, Any], context: FieldSource) -> Any:
    if isinstance(node, tuple):  # compiled string pieces
        if len(node) == 1 and node[0][0] == "" and node[0][1] is not None:
            return context.value(record, node[0][1])
        parts = []
        for literal, field in node:
            parts.append(literal)
            if field is not None:
                parts.append(_text(context.value(record, field)))
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
