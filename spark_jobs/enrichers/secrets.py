"""The API token: where it comes from, and keeping it out of every text we produce.

The config only names the source (an environment variable or a file), never the value:
the config travels as JSON to Spark executors, into job arguments and run metadata,
all places other people can read. Command lines are visible to every local user too,
so there is deliberately no way to pass the token as an argument. The value is read
where the HTTP session opens, held in a :class:`Secret` whose ``repr`` hides it, and
scrubbed, in every form a server may echo it in, from any error message.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from .redaction import HIDDEN, compile_secret, redact


class SecretError(ValueError):
    """The configured token source is unset, empty or unreadable. Names the source only."""


class Secret:
    """A string that does not show itself in ``repr``/``str``; ``reveal()`` returns it."""

    __slots__ = ("_spellings", "_value")

    def __init__(self, value: str) -> None:
        if not value:
            raise SecretError("a secret must not be empty")
        self._value = value
        self._spellings = compile_secret(value)

    def reveal(self) -> str:
        return self._value

    def redact(self, text: str) -> str:
        """``text`` with the secret replaced by ``***`` wherever it shows: as sent,
        JSON-, HTML- or ``repr``-escaped, URL-encoded, base64-encoded, or cut short
        (``redaction.py``)."""
        return redact(text, self._spellings)

    @staticmethod
    def redact_all(text: str, secrets: Iterable[Secret]) -> str:
        """``text`` redacted of every one of ``secrets`` in one pass: one secret's match
        cut short must not hide another's rest (two keys sharing their first characters)."""
        return redact(text, [spelling for secret in secrets for spelling in secret._spellings])

    def __repr__(self) -> str:
        return f"Secret({HIDDEN!r})"

    __str__ = __repr__

    def __reduce__(self) -> tuple[object, ...]:
        # Pickling would copy the value into Spark task closures and shuffle files.
        raise TypeError("a Secret is not picklable: ship the config and read the source")


def read_token(token_env: str | None, token_file: str | None) -> Secret | None:
    """The bearer token from ``token_env`` or ``token_file`` (at most one is set).

    Surrounding whitespace is stripped: files usually end with a newline.
    """
    if token_env is not None:
        return read_env_secret(token_env, "token_env")
    if token_file is not None:
        try:
            value = Path(token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise SecretError(f"token_file: cannot read {token_file}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise SecretError(f"token_file: {token_file} is not UTF-8 text") from None
        if not value:
            raise SecretError(f"token_file: {token_file} is empty")
        return Secret(value)
    return None


def read_sent_secrets(
    token_env: str | None, token_file: str | None, secret_headers: Mapping[str, str]
) -> list[tuple[str, Secret]]:
    """``(header, secret)`` for every secret a config sends: the bearer token first (as
    ``Authorization``, without its ``Bearer`` prefix), then each ``secret_headers`` value.
    Read on the executor, by the session and by the response cache's scope."""
    token = read_token(token_env, token_file)
    sent = [("Authorization", token)] if token is not None else []
    for name, variable in secret_headers.items():
        sent.append((name, read_env_secret(variable, f"secret_headers.{name}")))
    return sent


def read_env_secret(variable: str, option: str) -> Secret:
    """The secret in environment variable ``variable``; ``option`` is the config option
    that named it (``token_env``, ``secret_headers.X-Api-Key``), for the message."""
    value = os.environ.get(variable, "").strip()
    if not value:
        raise SecretError(f"{option}: environment variable {variable} is not set or empty")
    return Secret(value)


def secret_variables(
    token_env: str | None, secret_headers: Mapping[str, str]
) -> list[tuple[str, str]]:
    """``(option, variable)`` for every environment variable a config reads a secret from."""
    named = [("token_env", token_env)] if token_env else []
    return named + [(f"secret_headers.{h}", v) for h, v in secret_headers.items()]


def check_secret_variables(
    variables: list[tuple[str, str]], provided_elsewhere: Callable[[str], bool]
) -> None:
    """Fail on the first variable that is neither set (non-empty) here nor
    ``provided_elsewhere`` (Spark conf that hands it to the executors). Called on the
    driver before Spark starts: the executors read the value, this only checks it exists."""
    for option, variable in variables:
        if not os.environ.get(variable, "").strip() and not provided_elsewhere(variable):
            raise SecretError(f"{option}: environment variable {variable} is not set")
