"""How many tokens a text will count as, before the provider says (``usage``).

With ``tiktoken`` installed (and its encoding available offline) its ``cl100k_base``
count; otherwise a length estimate of ``CHARS_PER_TOKEN`` characters a token, which
English prose meets closely and which errs high on JSON punctuation. The estimate only
reserves room under a token limit until the answer's ``usage`` settles it, so its error
costs a little pacing, never a wrong count.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from typing import Any

CHARS_PER_TOKEN = 4.0
MESSAGE_TOKENS = 4
"""What a chat message adds beyond its text (role, separators), as OpenAI counts."""


@functools.cache
def _tokenizer() -> Callable[[str], int] | None:
    try:
        import tiktoken  # type: ignore[import-not-found]

        encoding = tiktoken.get_encoding("cl100k_base")
    except Exception:  # not installed, or its encoding cannot be fetched here
        return None
    return lambda text: len(encoding.encode(text))


def estimate_tokens(text: str) -> int:
    """Tokens ``text`` is expected to count as (at least 1 for a non-empty text)."""
    count = _tokenizer()
    if count is not None:
        return count(text)
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def tokenizer_name() -> str:
    """What :func:`estimate_tokens` uses, for the ``--estimate`` report."""
    found = _tokenizer() is not None
    return "tiktoken cl100k_base" if found else f"{CHARS_PER_TOKEN:g} chars/token"


def prompt_tokens(body: str) -> int:
    """The prompt tokens a request body will count as: its messages' text (and the
    system prompt, an embedding's inputs, the ``response_format`` schema, which providers
    count too), not the JSON around them; the whole body when it is not such JSON."""
    try:
        request: Any = json.loads(body)
    except ValueError:
        return estimate_tokens(body)
    if not isinstance(request, dict):
        return estimate_tokens(body)
    if "input" in request:  # embeddings: one input, or a list of them
        given = request["input"]
        inputs = given if isinstance(given, list) else [given]
        return sum(estimate_tokens(str(text)) for text in inputs)
    found = request.get("messages")
    messages: list[Any] = found if isinstance(found, list) else []
    texts = [str(m.get("content") or "") for m in messages if isinstance(m, dict)]
    if isinstance(request.get("system"), str):
        texts.append(request["system"])
    schema = request.get("response_format")
    if schema is not None:
        texts.append(json.dumps(schema, separators=(",", ":")))
    return sum(estimate_tokens(text) for text in texts) + MESSAGE_TOKENS * len(messages)
