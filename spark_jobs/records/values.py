"""The values a stored record may hold, checked where it is parsed, and counts as every
line writes them.

Stored documents are hostile input (anyone with write access to the bucket can craft
one): a crafted ``"requests_made": "x"`` once reached the page as a string and raised
``TypeError`` far from the file. Each record's parser checks its values with these, so
a bad one is a ``ValueError`` naming the field where the document is read.
"""

from __future__ import annotations

import math
from typing import Any

_INT64 = 2**63


def is_count(value: Any) -> bool:
    """A whole number a counter can hold (not a bool, not negative, within int64)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _INT64


def is_number(value: Any) -> bool:
    """A finite non-negative number (a duration, a cost, a memory size)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value < _INT64
    )


def is_flag(value: Any) -> bool:
    return isinstance(value, bool)


def is_text(value: Any) -> bool:
    return isinstance(value, str)


def is_optional_text(value: Any) -> bool:
    return value is None or isinstance(value, str)


def format_count(number: int | None, separator: str = " ") -> str:
    """``48 213``: thousands separated as every progress line and page writes them (the
    page passes a narrow no-break space); ``?`` for an unknown count."""
    return "?" if number is None else f"{number:,}".replace(",", separator)
