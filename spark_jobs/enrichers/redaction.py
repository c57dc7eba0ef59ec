"""Finding a secret in text a server sent back, in whatever form it was echoed.

A server quoting a request back rarely quotes it verbatim: a JSON error body escapes it
(``\\"``, ``\\/``, ``\\u00e9`` or ``\\u00E9``, Go's ``\\u003c``), a redirect or log line
URL-encodes it (``%2F`` or ``+``, either hex case, whichever characters its encoder
leaves alone), an HTML page or a Python ``repr`` escapes it its own way, a message
quoted in a JSON body or a log line is escaped twice, a log may lowercase it, an echoed
``Authorization: Basic`` header base64-encodes it (after ``user:``, so at any of the
three alignments), and a body cut to a snippet may hold only its start.

So a secret is matched character by character, each character in any of the forms text
carries it in (:func:`char_forms`), over each of its *spellings*: the value itself and
its base64 encodings (:func:`spellings`). Every match, and any start of one at least
``PREFIX_CHARS`` characters long, is found in the original text, at every position and
for every spelling and secret at once; the longest one at a position wins and
overlapping ones merge, so one spelling's cut start never hides the rest of another's
(a key with ``/`` once left ``***/K7MDENG/bPxRfiCYEXAMPLEKEY``).
"""

from __future__ import annotations

import base64
import functools
import html
import json
import re
from collections.abc import Iterable, Iterator

HIDDEN = "***"
PREFIX_CHARS = 6
"""A secret's start this long or longer counts as the secret (a snippet cut through it,
a server echoing part of it); shorter starts are too common in ordinary text."""


@functools.lru_cache(maxsize=4096)  # a long key repeats its few dozen characters
def char_forms(char: str) -> tuple[str, ...]:
    """``char`` as text may carry it, longest first: as is, or in the other case (a
    server that lowercases what it logs); percent-encoded (its UTF-8 bytes, either hex
    case; ``+`` for a space); JSON-escaped (``\\uXXXX`` in either hex case, surrogate
    pairs beyond the BMP, the short escapes, ``\\/``); as Python's ``repr`` shows it
    (``\\'``, ``\\x07``); HTML-escaped (named or ``&#NN;``). And each of those escaped
    once more, by JSON or ``repr``: an error quoted inside a JSON body or a log line."""
    point = ord(char)
    raw = bytes([point - 0xDC00]) if 0xDC80 <= point <= 0xDCFF else _utf8(char)
    percent = "".join(f"%{byte:02X}" for byte in raw)
    units = [point] if point < 0x10000 else _surrogates(point)
    unicode = "".join(f"\\u{unit:04x}" for unit in units)
    forms = {char, percent, percent.lower(), unicode, unicode.upper().replace("\\U", "\\u")}
    forms |= {json.dumps(char)[1:-1], repr(char)[1:-1], html.escape(char), f"&#{point};"}
    forms |= {cased for cased in (char.lower(), char.upper()) if len(cased) == 1}
    forms |= {"\\" + char} if char in "/'\"" else set()
    forms |= {"+"} if char == " " else set()
    forms |= {json.dumps(form)[1:-1] for form in forms} | {repr(form)[1:-1] for form in forms}
    return tuple(sorted(forms, key=len, reverse=True))


def spellings(value: str) -> tuple[str, ...]:
    """``value`` and its base64 encodings (standard and URL-safe, padded and not), each at
    the three alignments it can have inside a longer encoded text (``user:<value>`` of
    Basic auth): the characters that depend on the value alone. One shorter than
    ``PREFIX_CHARS`` is left out: it would hide ordinary words."""
    raw = _utf8(value)
    encoded: set[str] = set()
    for shift in range(3):  # bytes of what precedes the value in its 3-byte group
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            text = encode(b"\0" * shift + raw).decode()[(0, 2, 3)[shift] :]
            encoded |= {text, text.rstrip("=")}
    kept = {form for form in encoded if len(form) >= PREFIX_CHARS}
    return (value, *sorted(kept, key=len, reverse=True))


class Spelling:
    """One spelling of a secret, compiled: a regular expression finding where its first
    characters start (in any of their forms, overlapping starts included), and the forms
    of every character to follow a match as far as it goes."""

    __slots__ = ("_chars", "_needed", "_starts")

    def __init__(self, text: str) -> None:
        self._chars = [char_forms(char) for char in text]
        self._needed = min(len(text), PREFIX_CHARS)
        head = "".join(
            "(?:" + "|".join(map(re.escape, forms)) + ")" for forms in self._chars[: self._needed]
        )
        self._starts = re.compile(f"(?=(?:{head}))", re.DOTALL)

    def spans(self, text: str) -> Iterator[tuple[int, int]]:
        """``(start, end)`` of each longest match in ``text``: the whole spelling, or a
        start of it at least ``PREFIX_CHARS`` (or all its) characters long."""
        for found in self._starts.finditer(text):
            start = found.start()
            end = self._reach(text, start)
            if end > start:
                yield start, end

    def _reach(self, text: str, start: int) -> int:
        """The furthest end of a match from ``start``, trying every form of each character
        (a ``%`` may be ``%25`` or itself followed by ``25``): -1 when none is long enough."""
        ends, furthest = {start}, -1
        for index, forms in enumerate(self._chars):
            ends = {end + len(form) for end in ends for form in forms if text.startswith(form, end)}
            if not ends:
                break
            if index + 1 >= self._needed:
                furthest = max(ends)
        return furthest


def compile_secret(value: str) -> tuple[Spelling, ...]:
    """Every spelling of ``value``, ready for :func:`redact`."""
    return tuple(Spelling(text) for text in spellings(value))


def redact(text: str, secrets: Iterable[Spelling]) -> str:
    """``text`` with every match of ``secrets`` (all found first, in the original text,
    then merged where they overlap or touch) replaced by ``***``."""
    spans = sorted(span for spelling in secrets for span in spelling.spans(text))
    if not spans:
        return text
    kept: list[str] = []
    done, open_start, open_end = 0, spans[0][0], spans[0][1]
    for start, end in spans[1:]:
        if start <= open_end:
            open_end = max(open_end, end)
            continue
        kept += [text[done:open_start], HIDDEN]
        done, open_start, open_end = open_end, start, end
    kept += [text[done:open_start], HIDDEN, text[open_end:]]
    return "".join(kept)


def _utf8(text: str) -> bytes:
    """``text``'s bytes; a lone surrogate (an undecodable byte of the environment, or one
    a server echoed) as ``surrogateescape`` or ``surrogatepass`` gives it back."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def _surrogates(point: int) -> list[int]:
    offset = point - 0x10000
    return [0xD800 + (offset >> 10), 0xDC00 + (offset & 0x3FF)]
