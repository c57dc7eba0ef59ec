"""Answers that refuse the account, not the record, told apart by the provider's own body.

OpenAI answers ``429`` both to "too fast" (``rate_limit_exceeded``: wait and try again)
and to "no credit left" (``insufficient_quota``: no retry ever helps). Only the error body
tells them apart, so an error status's body is read here, defensively: only when it is at
most :data:`MAX_ERROR_BODY` bytes (the attempt has capped it already), only a JSON object
whose ``error`` is an object, only string fields; a ``code`` or ``type`` that is not a
short identifier is ignored and the message is cut to ``SNIPPET_CHARS`` printable
characters, so a hostile body can neither pose as a code nor flood a log line.

An account-level answer becomes an :class:`~.errors.AccountError`: permanent, never a
throttle, never retried, and systemic at once (``partition_runner/systemic.py``). Those
answers are a 4xx whose ``error.code`` or ``error.type`` is one of these (any case):

OpenAI and Azure OpenAI (``{"error": {"message", "type", "code", "param"}}``):

- ``insufficient_quota`` (429; type and code): "You exceeded your current quota, please
  check your plan and billing details" - OpenAI's error-codes guide
  (developers.openai.com/docs/guides/error-codes: "run out of credits or hit your maximum
  monthly spend").
- ``credit_balance_exhausted``, ``organization_spend_limit_exceeded``,
  ``project_spend_limit_exceeded``, ``organization_usage_limit_exceeded`` (429, type
  ``insufficient_quota``): the codes OpenAI documents under that type, "retrying will not
  restore access" (as quoted by Microsoft's Dev Proxy page
  learn.microsoft.com/microsoft-cloud/dev/dev-proxy/concepts/openai-insufficient-quota).
- ``billing_hard_limit_reached``, ``billing_not_active``: OpenAI's earlier codes for a
  spent hard limit and an inactive billing account (no current documentation page; still
  answered by older deployments and OpenAI-compatible gateways).
- ``invalid_api_key``, ``account_deactivated`` (401), ``unsupported_country_region_territory``
  (403): the guide's "Incorrect API key provided", deactivated account, "Country, region,
  or territory not supported".
- ``model_not_found`` (404): "The model ... does not exist or you do not have access to it".
- ``DeploymentNotFound`` (Azure OpenAI, 404): "The API deployment for this resource does
  not exist".

Anthropic (``{"type": "error", "error": {"type", "message"}}``, docs.claude.com/en/api/errors
and the SDKs' ``ErrorType``):

- ``authentication_error`` (401), ``permission_error`` (403), ``billing_error`` (402).
- ``not_found_error`` (404) whose message names the model (``"model: claude-..."``): the
  Messages API's one resource is the model; another missing resource is the record's.
- ``invalid_request_error`` (400) whose message says "credit balance is too low" (how the
  API answers an account without credit).

Any other 401 is account-level too (the credentials are refused, and they are the job's,
the same for every record: RFC 9110 section 15.5.2). A bare 403 is not: an API may refuse
one record's resource and serve the next. ``rate_limit_exceeded``, ``rate_limit_error``,
``overloaded_error`` and the rest stay what their status says (throttled, server error).

:func:`provider_error` is also what the progress line names a call's answer by (``429
rate_limit_exceeded``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import SNIPPET_CHARS, AccountError

#: Error bodies larger than this are not read for a code (a provider's are a few hundred bytes).
MAX_ERROR_BODY = 64 * 2**10
#: Statuses whose message is not shown: their bodies tend to quote the credentials back.
CREDENTIAL_STATUSES = frozenset({401, 403})

_ACCOUNT_CODES = frozenset(
    name.casefold()
    for name in (
        # OpenAI, Azure OpenAI
        "insufficient_quota",
        "credit_balance_exhausted",
        "organization_spend_limit_exceeded",
        "project_spend_limit_exceeded",
        "organization_usage_limit_exceeded",
        "billing_hard_limit_reached",
        "billing_not_active",
        "invalid_api_key",
        "account_deactivated",
        "unsupported_country_region_territory",
        "model_not_found",
        "DeploymentNotFound",
        # Anthropic
        "authentication_error",
        "permission_error",
        "billing_error",
    )
)
_IDENTIFIER = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")


@dataclass(frozen=True)
class ProviderError:
    """What an error body says: its ``code`` (``error.code``, else ``error.type``), the
    other of the two (``kind``), and its ``message`` (printable, cut)."""

    code: str | None
    kind: str | None
    message: str

    def names(self) -> tuple[str, ...]:
        return tuple(n.casefold() for n in (self.code, self.kind) if n)


def provider_error(body: bytes) -> ProviderError | None:
    """The provider's error object in ``body``; None when there is none to be read."""
    if len(body) > MAX_ERROR_BODY:
        return None
    try:
        document: Any = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, bad UTF-8, nested beyond the parser
        return None
    error = document.get("error") if isinstance(document, dict) else None
    if not isinstance(error, dict):
        return None
    code, kind = _identifier(error.get("code")), _identifier(error.get("type"))
    if code is None:
        code, kind = kind, None
    message = error.get("message")
    text = " ".join(_UNPRINTABLE.sub(" ", message).split()) if isinstance(message, str) else ""
    text = text if len(text) <= SNIPPET_CHARS else text[: SNIPPET_CHARS - 3] + "..."
    if code is None and not text:
        return None
    return ProviderError(code, kind, text)


def is_account_level(status: int, error: ProviderError | None) -> bool:
    """Whether a ``status`` answer with ``error`` refuses the account (module docstring)."""
    if status == 401:
        return True
    if error is None or not 400 <= status < 500:
        return False
    names, message = error.names(), error.message.casefold()
    if any(name in _ACCOUNT_CODES for name in names):
        return True
    if "not_found_error" in names:
        return message.startswith("model") or " model" in message
    return "invalid_request_error" in names and "credit balance is too low" in message


def account_error(
    status: int,
    error: ProviderError | None,
    request: str,
    redact: Callable[[str], str],
) -> AccountError:
    """The error for an account-level answer: ``HTTP 429 insufficient_quota: You exceeded
    ... (POST https://...)``, ``redact``-ed; a 401/403's message is not shown."""
    code = error.code if error is not None else None
    if status in CREDENTIAL_STATUSES:
        text = "the credentials were refused (body not shown)"
    else:
        text = error.message if error is not None and error.message else "(no message)"
    named = f" {code}" if code else ""
    return AccountError(
        redact(f"HTTP {status}{named}: {text} ({request})"), status=status, code=code
    )


def _identifier(value: object) -> str | None:
    return value if isinstance(value, str) and _IDENTIFIER.fullmatch(value) else None
