"""How many tokens a text will count as, before the provider says (``usage``).

With ``tiktoken`` installed (and its encoding available offline) its ``cl100k_base``
count; otherwise a length estimate of ``CHARS_PER_TOKEN`` characters a token, which
English prose meets closely and which errs high on JSON punctuation. The estimate only
reserves room under a token limit until the answer's ``usage`` settles it, so its error
costs a little pacing, never a wrong count.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

CHARS_PER_TOKEN = 4.0


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
