"""A model's answer to a record: its typed columns and usage, or the class of its failure.

Beside the HTTP failures the sender raises, an answer that arrived can still be unusable,
each its own dead-letter class so a run can be read (and ``--retry-dead-letters`` aimed)
by what went wrong:

* :class:`InvalidOutputError`: the text is not JSON, not of the ``output_schema``, or
  holds a value its column cannot hold; the raw text is kept in the message (up to
  ``RAW_CHARS``);
* :class:`RefusedError`: the model declined (OpenAI ``message.refusal``, Anthropic
  ``stop_reason: refusal``);
* :class:`ContentFilteredError`: the provider's filter cut the answer
  (``finish_reason: content_filter``).

All are permanent: the same prompt at the same parameters would be refused the same way.
An answer whose shape or values no column can hold (``choices`` of the wrong type, an
embedding of ``NaN`` or beyond a float, a ``usage`` beyond ``MAX_USAGE_TOKENS``, JSON
nested too deeply) is an :class:`InvalidResponseError`, as any unusable body is; the
text's value its column cannot hold (an integer beyond 64 bits, a lone surrogate) is an
:class:`InvalidOutputError`. Never a Python error of the reading itself (``AttributeError``,
``OverflowError``...): an answer is read as data, never trusted to have its shape.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidResponseError, PermanentError, snippet
from ..json_paths import text_problem
from .config import TOKEN_COLUMNS, ModelConfig
from .output_schema import OutputMismatch, conform

RAW_CHARS = 4000
"""Most characters of an unusable answer's text kept in its dead letter."""
MAX_USAGE_TOKENS = 10_000_000
"""A usage count above this (ten times the largest context window) is not believed: the
pacing keeps its estimate, and the answer is a dead letter (its count would be a column
and a cost). A hostile answer must not stall or unbalance the pacing, nor fail a batch."""
FLOAT32_MAX = 3.4028234663852886e38
"""The largest finite value an embedding's ``float`` column holds."""

Output = dict[str, Any]
Redact = Callable[[str], str]


class InvalidOutputError(PermanentError):
    """The answer's text is not JSON of the output schema, or holds a value its column
    cannot hold (an integer beyond 64 bits, a string with a lone surrogate)."""


class RefusedError(PermanentError):
    """The model refused to answer."""


class ContentFilteredError(PermanentError):
    """The provider's content filter withheld the answer."""


def usage(document: Any, api: str) -> tuple[int, int] | None:
    """(prompt, completion) tokens an answer reports, or None without usage."""
    found = document.get("usage") if isinstance(document, dict) else None
    if not isinstance(found, dict):
        return None
    names = ("input_tokens", "output_tokens") if api == "anthropic" else TOKEN_COLUMNS
    counts = [found.get(name, 0) for name in names]
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts):
        return None
    return counts[0], counts[1]


class ModelAnswers:
    """``answers(payload, where, redact)`` -> the record's output (the HTTP enricher's
    answer mapping for a model endpoint)."""

    def __init__(self, config: ModelConfig) -> None:
        self.config = config
        self._column = config.column

    def __call__(self, payload: bytes, where: str, redact: Redact) -> Output:
        answer = _Answer(payload, where, redact)
        try:
            document = json.loads(payload)
        except (ValueError, RecursionError):
            text = snippet(payload, redact)
            raise InvalidResponseError(redact(f"invalid JSON from {where}: {text!r}")) from None
        tokens = self._tokens(document, answer)
        if self.config.api == "embeddings":
            return {self._column: _embedding(document, answer), **tokens}
        text = self._text(document, answer)
        schema = self.config.output_schema
        if schema is None:
            return {self._column: _free_text(text, answer), **tokens}
        return {**_structured(text, schema, answer), **tokens}

    def _tokens(self, document: Any, answer: _Answer) -> dict[str, int]:
        counted = usage(document, self.config.api) or (0, 0)
        if max(counted) > MAX_USAGE_TOKENS:
            count = str(max(counted))
            shown = count if len(count) <= 24 else f"{count[:20]}... ({len(count)} digits)"
            raise InvalidResponseError(
                answer.redact(
                    f"a usage of {shown} tokens in the answer from {answer.where}: more "
                    f"than the {MAX_USAGE_TOKENS} any call counts"
                )
            )
        return dict(zip(TOKEN_COLUMNS, counted, strict=True))

    def _text(self, document: Any, answer: _Answer) -> str:
        if self.config.api == "anthropic":
            return _anthropic_text(document, answer)
        try:
            choice = document["choices"][0]
            message = choice["message"]
        except (KeyError, IndexError, TypeError):
            raise answer.unexpected("choices[0].message") from None
        if not isinstance(message, dict):
            raise answer.unexpected("choices[0].message (an object)")
        refusal = message.get("refusal")
        if refusal:
            raise RefusedError(
                answer.redact(f"refused by the model ({answer.where}): {_shown(refusal)}")
            )
        if choice.get("finish_reason") == "content_filter":
            raise ContentFilteredError(
                answer.redact(f"content filter ({answer.where}): the answer was withheld")
            )
        content = message.get("content")
        if not isinstance(content, str):
            raise answer.unexpected("choices[0].message.content")
        return content


@dataclass(frozen=True)
class _Answer:
    """One answer being read: its body, where it came from, and the redaction of its
    messages, which quote the body (never re-encode the parsed document: nesting that
    parsed may be too deep to write again from further down the stack)."""

    payload: bytes
    where: str
    redact: Redact

    def unexpected(self, missing: str) -> InvalidResponseError:
        text = snippet(self.payload, self.redact)
        return InvalidResponseError(
            self.redact(f"no {missing} in the answer from {self.where}: {text!r}")
        )

    def invalid_output(self, problem: str, text: str) -> InvalidOutputError:
        message = f"{problem} from {self.where}; raw: {_raw(text)}"
        return InvalidOutputError(self.redact(message))


def _free_text(text: str, answer: _Answer) -> str:
    problem = text_problem(text)
    if problem is not None:
        raise answer.invalid_output(f"the answer is {problem}", text)
    return text


def _structured(text: str, schema: Any, answer: _Answer) -> Output:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise answer.invalid_output(f"not JSON ({error})", text) from None
    try:
        conformed: Output = conform(value, schema)
    except OutputMismatch as mismatch:
        raise answer.invalid_output(f"not of output_schema: {mismatch}", text) from None
    return conformed


def _embedding(document: Any, answer: _Answer) -> list[float]:
    try:
        vector = document["data"][0]["embedding"]
    except (KeyError, IndexError, TypeError):
        raise answer.unexpected("data[0].embedding") from None
    if not isinstance(vector, list) or not all(map(_is_float, vector)):
        raise answer.unexpected("data[0].embedding (finite numbers that a float holds)")
    return [float(x) for x in vector]


def _is_float(x: Any) -> bool:
    """A finite number of a float's range: compared, never converted, as ``float()`` of an
    integer of 400 digits overflows; NaN fails every comparison."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return False
    return -FLOAT32_MAX <= x <= FLOAT32_MAX


def _anthropic_text(document: Any, answer: _Answer) -> str:
    if not isinstance(document, dict) or not isinstance(document.get("content"), list):
        raise answer.unexpected("content[]")
    if document.get("stop_reason") == "refusal":
        raise RefusedError(answer.redact(f"refused by the model ({answer.where})"))
    texts = [
        block.get("text", "")
        for block in document["content"]
        if isinstance(block, dict) and block.get("type") == "text"
    ]
    if not all(isinstance(text, str) for text in texts):
        raise answer.unexpected("content[].text (a string)")
    return "".join(texts)


def _shown(value: Any) -> str:
    """A refusal as its dead letter shows it: the text, or only its JSON kind."""
    if isinstance(value, str):
        return _raw(value)
    return f"(a JSON {type(value).__name__}, not shown)"


def _raw(text: str) -> str:
    return repr(text if len(text) <= RAW_CHARS else text[:RAW_CHARS] + "...")
