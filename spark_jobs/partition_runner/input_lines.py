"""Where in its file a malformed row is: the line a dead letter names.

Spark's readers say which file a row came from, never which line. Counting lines for
every row would cost a pass over the input on every run; instead, only for a row the
reader could not parse, its raw text (the corrupt-record column) is looked for in its
file, line by line, where a record can start. Runs on the executor that meets the row,
so a run without malformed rows pays nothing. Identical malformed records are all
named: the text cannot tell them apart.
"""

from __future__ import annotations

from collections import deque
from functools import lru_cache

import fsspec


@lru_cache(maxsize=256)
def record_lines(url: str, text: str, encoding: str = "utf-8") -> tuple[int, ...]:
    """The 1-based line numbers where ``text`` starts as a record in the file at ``url``:
    the whole text over as many lines as it spans, else its first line alone (a reader
    may have kept more or less of a broken record than one line)."""
    wanted = text.replace("\r\n", "\n").split("\n")
    found = _find(url, wanted, encoding)
    if not found and len(wanted) > 1:
        found = _find(url, wanted[:1], encoding)
    return found


def _find(url: str, wanted: list[str], encoding: str) -> tuple[int, ...]:
    window: deque[str] = deque(maxlen=len(wanted))
    found = []
    with fsspec.open(url, "rb") as file:
        for number, raw in enumerate(file, start=1):
            line = raw.decode(encoding, errors="replace").rstrip("\r\n")
            window.append(line.lstrip("\ufeff") if number == 1 else line)
            if len(window) == len(wanted) and list(window) == wanted:
                found.append(number - len(wanted) + 1)
    return tuple(found)


def describe_lines(lines: tuple[int, ...]) -> str:
    """``line 7``, ``lines 7, 19`` or why no line is named."""
    if not lines:
        return "at an unknown line (its text was not found in the file)"
    label = "line" if len(lines) == 1 else "lines"
    return f"{label} {', '.join(map(str, lines[:10]))}{' ...' if len(lines) > 10 else ''}"
