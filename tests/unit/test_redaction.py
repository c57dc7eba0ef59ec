"""Redaction (``enrichers/redaction.py``): nothing of a secret survives, in any form a
server may echo it in, whatever characters it holds."""

from __future__ import annotations

import base64
import html
import json
import math
import re
from urllib.parse import quote, quote_plus

from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs.enrichers import Secret

AWS_STYLE = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
WINDOW = 8
"""A run of this many of a secret's characters left in a text counts as a leak."""


def utf16(text: str) -> list[int]:
    encoded = text.encode("utf-16-be")
    return [int.from_bytes(encoded[i : i + 2], "big") for i in range(0, len(encoded), 2)]


def lower_hex(encoded: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda escape: escape[0].lower(), encoded)


def basic_auth(user: str, secret: str) -> str:
    """The part of ``Basic base64(user:secret)`` that depends on the secret alone."""
    prefix = len(f"{user}:".encode())
    return base64.b64encode(f"{user}:{secret}".encode()).decode()[math.ceil(prefix * 4 / 3) :]


def echoed_forms(secret: str) -> dict[str, str]:
    """How a server may quote ``secret`` back, written out here independently of the
    redaction code."""
    raw = secret.encode()
    b64, url_b64 = base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()
    return {
        "raw": secret,
        "json": json.dumps(secret)[1:-1],
        "json, non-ASCII kept": json.dumps(secret, ensure_ascii=False)[1:-1],
        "json, escaped slash": json.dumps(secret)[1:-1].replace("/", "\\/"),
        "json, every character \\uXXXX": "".join(f"\\u{unit:04X}" for unit in utf16(secret)),
        "quote": quote(secret, safe=""),
        "quote, keeping /": quote(secret),
        "quote, lower hex": lower_hex(quote(secret, safe="")),
        "quote_plus": quote_plus(secret),
        "quote_plus, lower hex": lower_hex(quote_plus(secret)),
        "html": html.escape(secret),
        "repr": repr(secret)[1:-1],
        "base64": b64,
        "base64, unpadded": b64.rstrip("="),
        "base64 url": url_b64,
        "basic auth, user a": basic_auth("a", secret),
        "basic auth, user ab": basic_auth("ab", secret),
        "basic auth, user abc": basic_auth("abc", secret),
    }


def leaked(form: str, around: str, redacted: str) -> list[str]:
    """Runs of ``WINDOW`` characters of ``form`` (all of it, if shorter) still in
    ``redacted`` that the text around it did not hold by itself."""
    size = min(WINDOW, len(form))
    windows = {form[i : i + size] for i in range(len(form) - size + 1)}
    return sorted(w for w in windows if w in redacted and w not in around)


def test_a_key_with_slashes_leaves_nothing_of_itself():
    """The issue's example: the raw form's match was cut by a URL-encoded form's start."""
    redacted = Secret(AWS_STYLE).redact(f"invalid api key {AWS_STYLE}")
    assert redacted == "invalid api key ***"


def test_every_form_of_an_odd_secret_is_gone_whole():
    for secret in [AWS_STYLE, 'p@ss wörd+/="q\\z', "ключ-🔑-секрет", "tab\there\nnewline"]:
        hidden = Secret(secret)
        for name, form in echoed_forms(secret).items():
            text = f"error: got {form}; try again"
            assert hidden.redact(text) == "error: got ***; try again", (secret, name)


def test_two_secrets_sharing_a_start_hide_each_other_whole():
    """One pass over both: the first secret's cut match must not hide the other's rest."""
    first, second = Secret("abcdefgh-first-0123"), Secret("abcdefgh/second+4567")
    text = "keys abcdefgh-first-0123 and abcdefgh%2Fsecond%2B4567"
    assert Secret.redact_all(text, [first, second]) == "keys *** and ***"


def test_a_snippet_cut_through_a_secret_hides_its_start_and_ordinary_text_stays():
    hidden = Secret(AWS_STYLE)
    assert hidden.redact(f"body: {AWS_STYLE[:11]}") == "body: ***"
    assert hidden.redact("wJal is short; ordinary words stay") == (
        "wJal is short; ordinary words stay"
    )


SPECIAL = st.sampled_from([*"/+=\"\\ %&'<>:?#\t\n", "é", "ß", "中", "🔑", "\u2028"])
CHARS = st.one_of(SPECIAL, st.characters(blacklist_categories=("Cs",), blacklist_characters="*"))
"""A wide alphabet: non-ASCII and control characters too; no ``*`` (the marker is made of
it) and no lone surrogate (``quote`` cannot encode one)."""


@settings(max_examples=300, deadline=None)
@given(
    secret=st.text(CHARS, min_size=6, max_size=40),
    before=st.text(CHARS, max_size=30),
    after=st.text(CHARS, max_size=30),
    cut=st.integers(min_value=6, max_value=40),
)
def test_no_run_of_any_echoed_form_survives_in_random_text(secret, before, after, cut):
    hidden = Secret(secret)
    forms = {**echoed_forms(secret), "cut short": secret[:cut]}
    for name, form in forms.items():
        redacted = hidden.redact(before + form + after)
        assert not leaked(form, before + after, redacted), (name, form, redacted)
