"""A model's answer to a record: its typed columns and usage, or the class of its failure.

Beside the HTTP failures the sender raises, an answer that arrived can still be unusable,
each its own dead-letter class so a run can be read (and ``--retry-dead-letters`` aimed)
by what went wrong:

* :class:`InvalidOutputError`: the text is not JSON, or not of the ``output_schema``; the
  raw text is kept in the message (up to ``RAW_CHARS``);
* :class:`RefusedError`: the model declined (OpenAI ``message.refusal``, Anthropic
  ``stop_reason: refusal``);
* :class:`ContentFilteredError`: the provider's filter cut the answer
  (``finish_reason: content_filter``).

All are permanent: the same prompt at the same parameters would be refused the same way.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..errors import InvalidResponseError, PermanentError, snippet
from .config import TOKEN_COLUMNS, ModelConfig
from .output_schema import OutputMismatch, conform

RAW_CHARS = 4000
"""Most characters of an unusable answer's text kept in its dead letter."""

Output = dict[str, Any]
Redact = Callable[[str], str]


class InvalidOutputError(PermanentError):
    """The answer's text is not JSON of the output schema."""


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
        try:
            document = json.loads(payload)
        except (ValueError, RecursionError):
            text = snippet(payload, redact)
            raise InvalidResponseError(redact(f"invalid JSON from {where}: {text!r}")) from None
        counted = usage(document, self.config.api) or (0, 0)
        tokens = dict(zip(TOKEN_COLUMNS, counted, strict=True))
        if self.config.api == "embeddings":
            return {self._column: self._embedding(document, where, redact), **tokens}
        text = self._text(document, where, redact)
        schema = self.config.output_schema
        if schema is None:
            return {self._column: text, **tokens}
        return {**self._structured(text, schema, where, redact), **tokens}

    def _text(self, document: Any, where: str, redact: Redact) -> str:
        if self.config.api == "anthropic":
            return _anthropic_text(document, where, redact)
        try:
            choice = document["choices"][0]
            message = choice["message"]
        except (KeyError, IndexError, TypeError):
            raise _unexpected(document, where, redact, "choices[0].message") from None
        if message.get("refusal"):
            raise RefusedError(redact(f"refused by the model ({where}): {message['refusal']!r}"))
        if choice.get("finish_reason") == "content_filter":
            raise ContentFilteredError(redact(f"content filter ({where}): the answer was withheld"))
        content = message.get("content")
        if not isinstance(content, str):
            raise _unexpected(document, where, redact, "choices[0].message.content")
        return content

    def _structured(self, text: str, schema: Any, where: str, redact: Redact) -> Output:
        try:
            value = json.loads(text)
        except ValueError as error:
            message = f"not JSON ({error}) from {where}; raw: {_raw(text)}"
            raise InvalidOutputError(redact(message)) from None
        try:
            conformed: Output = conform(value, schema)
        except OutputMismatch as mismatch:
            message = f"not of output_schema: {mismatch} from {where}; raw: {_raw(text)}"
            raise InvalidOutputError(redact(message)) from None
        return conformed

    def _embedding(self, document: Any, where: str, redact: Redact) -> list[float]:
        try:
            vector = document["data"][0]["embedding"]
        except (KeyError, IndexError, TypeError):
            raise _unexpected(document, where, redact, "data[0].embedding") from None
        if not isinstance(vector, list) or not all(
            isinstance(x, int | float) and not isinstance(x, bool) for x in vector
        ):
            raise _unexpected(document, where, redact, "data[0].embedding (numbers)")
        return [float(x) for x in vector]


def _anthropic_text(document: Any, where: str, redact: Redact) -> str:
    if not isinstance(document, dict) or not isinstance(document.get("content"), list):
        raise _unexpected(document, where, redact, "content[]")
    if document.get("stop_reason") == "refusal":
        raise RefusedError(redact(f"refused by the model ({where})"))
    blocks = [b for b in document["content"] if isinstance(b, dict) and b.get("type") == "text"]
    return "".join(str(b.get("text", "")) for b in blocks)


def _raw(text: str) -> str:
    return repr(text if len(text) <= RAW_CHARS else text[:RAW_CHARS] + "...")


def _unexpected(document: Any, where: str, redact: Redact, missing: str) -> InvalidResponseError:
    text = snippet(json.dumps(document).encode(), redact)
    return InvalidResponseError(redact(f"no {missing} in the answer from {where}: {text!r}"))
