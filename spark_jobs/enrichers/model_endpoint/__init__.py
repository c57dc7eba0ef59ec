"""The model-endpoint enricher: OpenAI-compatible chat completions and embeddings, and
Anthropic's messages API, through the HTTP enricher's sender (retries, ``Retry-After``,
throttling, redirects policy, redaction) with token-aware pacing and a spend ledger.

``ModelConfig`` (``config.py``) says what to ask; ``requests.py`` turns it into the HTTP
enricher's body template; ``answers.py`` maps an answer to typed columns or a failure of
its own class; ``pacing.py`` charges each call's tokens and cost as its provider does
(``token_limit.py``: one limit's share and shape) and settles them with ``usage``.
``batch_calls.py`` sends the requests as rows of the provider's batch API instead
(``model.mode: batch``; ``batch_protocols.py`` speaks OpenAI's and Anthropic's).
"""

from .answers import ContentFilteredError, InvalidOutputError, ModelAnswers, RefusedError
from .config import TOKEN_COLUMNS, ModelConfig
from .pacing import COST_UNITS, ModelPacing
from .requests import request_options

__all__ = [
    "COST_UNITS",
    "TOKEN_COLUMNS",
    "ContentFilteredError",
    "InvalidOutputError",
    "ModelAnswers",
    "ModelConfig",
    "ModelPacing",
    "RefusedError",
    "request_options",
]
