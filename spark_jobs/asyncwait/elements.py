"""Stream elements that flow through the operator: watermarks in, results and failures out.

Records themselves are any user object; only the operator's outputs need a type, so a
consumer can tell a result from a failure from a watermark with ``isinstance``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

#: Event time before any record (Flink's ``Long.MIN_VALUE``): "nothing seen yet".
MIN_WATERMARK = -(2**63)
#: The watermark emitted at end of input (Flink's ``Long.MAX_VALUE``): "no more data".
MAX_WATERMARK = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Watermark:
    """An event-time boundary: no record after it carries a timestamp <= ``timestamp``."""

    timestamp: int


@dataclass(frozen=True, slots=True)
class Result:
    """A record whose call completed: ``value`` is what the async function returned."""

    record: Any
    value: Any
    attempts: int = 1


@dataclass(frozen=True, slots=True)
class Failure:
    """A record whose call ultimately failed (retries exhausted, permanent error, timeout).

    ``error`` is ``"ExceptionType: message"`` rather than the exception object, so that a
    failure is plain data: it can go to dead letters and into snapshots unchanged.
    ``transient`` says the last error was worth retrying (the budget ran out, or the
    record timed out) as opposed to a permanent error.
    """

    record: Any
    error: str
    attempts: int
    transient: bool = False


class WatermarkStatus(enum.Enum):
    """Whether a channel currently produces data; idle channels do not hold watermarks back
    (Flink's ``WatermarkStatus``, once called ``StreamStatus``)."""

    ACTIVE = "active"
    IDLE = "idle"


#: The longest ``error`` text: failures wait in the queue, and so in its snapshots.
MAX_ERROR_CHARS = 2_000


def describe_error(error: BaseException) -> str:
    """Render an exception as the ``error`` text of a :class:`Failure`, cut to
    :data:`MAX_ERROR_CHARS` (a user's function may raise with any message), and with any
    lone surrogate escaped (``\\ud800``): the text goes into a UTF-8 column, which cannot
    hold one, and a message may quote an answer's or a header's text."""
    message = str(error)
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"
