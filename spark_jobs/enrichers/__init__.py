"""Enrichment functions for the async wait operator: a configurable HTTP enricher, and
loading of users' own async functions.

Typical use inside a Spark task::

    config = HttpEnricherConfig.from_dict(json.loads(config_json))
    async with HttpEnricher(config) as enrich:
        operator = AsyncWaitOperator(enrich, capacity=config.capacity,
                                     retry=default_retry_strategy())
        async for output in operator.run(records):
            ...
"""

from .config import HttpEnricherConfig
from .errors import (
    AccountError,
    BatchRunning,
    BudgetExhausted,
    ClientStatusError,
    EnrichmentError,
    FieldValueError,
    InvalidResponseError,
    MissingFieldError,
    NotFoundError,
    PermanentError,
    ResponseTooLargeError,
    RetryableError,
    ServerError,
    ThrottledError,
    TransportError,
    default_retry_strategy,
    is_retryable,
    is_throttled,
)
from .http import HttpEnricher
from .rate_headers import parse_retry_after
from .request_budget import RequestBudget
from .response_field import ResponseField
from .secrets import Secret, SecretError, read_token
from .user_function import UserFunctionError, load_user_function, open_user_function

__all__ = [
    "AccountError",
    "BatchRunning",
    "BudgetExhausted",
    "ClientStatusError",
    "EnrichmentError",
    "FieldValueError",
    "HttpEnricher",
    "HttpEnricherConfig",
    "InvalidResponseError",
    "MissingFieldError",
    "NotFoundError",
    "PermanentError",
    "RequestBudget",
    "ResponseField",
    "ResponseTooLargeError",
    "RetryableError",
    "Secret",
    "SecretError",
    "ServerError",
    "ThrottledError",
    "TransportError",
    "UserFunctionError",
    "default_retry_strategy",
    "is_retryable",
    "is_throttled",
    "load_user_function",
    "open_user_function",
    "parse_retry_after",
    "read_token",
]
